-- m025_limits: limits a team sets once (issue 48). `limits`: requests per minute (and optionally tokens per minute) for an endpoint and a model, set or cleared by the store's administrator alone, read by every role. `slots`: the ledger of the calls that took a slot under a limit, and `slot_waits`: each job that waits for a slot, since when; both written only by take_slot (SECURITY DEFINER, owned by the schema's owner: its policies let only that owner, as current_user, write them; no role is granted INSERT, UPDATE or DELETE). take_slot(endpoint, model, tokens, job), called in the transaction that commits a call's pending row: with no limit for the endpoint and model, 0 at once; else, under a transaction-scoped advisory lock of that limit, it counts the slots taken in the last 61 seconds (a minute, and a second for a request to reach its provider after its slot is taken) and either takes one (0) or returns the seconds until one frees (and marks the job waiting since then).
-- Released: this text never changes (tests/test_house.py hashes it); a change is a new migration.

CREATE TABLE durable_job.limits (endpoint TEXT NOT NULL, model TEXT NOT NULL, requests_per_minute INTEGER NOT NULL CHECK (requests_per_minute > 0), tokens_per_minute BIGINT CHECK (tokens_per_minute > 0), set_by TEXT NOT NULL DEFAULT session_user, set_utc TEXT NOT NULL, PRIMARY KEY (endpoint, model));

ALTER TABLE durable_job.limits ENABLE ROW LEVEL SECURITY;

ALTER TABLE durable_job.limits FORCE ROW LEVEL SECURITY;

CREATE POLICY admin ON durable_job.limits USING ((SELECT durable_job.is_admin())) WITH CHECK ((SELECT durable_job.is_admin()));

CREATE POLICY reads ON durable_job.limits FOR SELECT USING (true);

CREATE TABLE durable_job.slots (id BIGSERIAL PRIMARY KEY, endpoint TEXT NOT NULL, model TEXT NOT NULL, tokens BIGINT NOT NULL, job_id TEXT NOT NULL, principal TEXT NOT NULL, taken_at TIMESTAMPTZ NOT NULL);

CREATE INDEX slots_taken ON durable_job.slots (endpoint, model, taken_at);

ALTER TABLE durable_job.slots ENABLE ROW LEVEL SECURITY;

ALTER TABLE durable_job.slots FORCE ROW LEVEL SECURITY;

CREATE POLICY taker ON durable_job.slots USING (current_user = (SELECT pg_catalog.pg_get_userbyid(n.nspowner) FROM pg_catalog.pg_namespace n WHERE n.nspname = 'durable_job')) WITH CHECK (current_user = (SELECT pg_catalog.pg_get_userbyid(n.nspowner) FROM pg_catalog.pg_namespace n WHERE n.nspname = 'durable_job'));

CREATE POLICY reads ON durable_job.slots FOR SELECT USING (true);

CREATE TABLE durable_job.slot_waits (job_id TEXT PRIMARY KEY, endpoint TEXT NOT NULL, model TEXT NOT NULL, since_utc TEXT NOT NULL, until_utc TEXT NOT NULL);

ALTER TABLE durable_job.slot_waits ENABLE ROW LEVEL SECURITY;

ALTER TABLE durable_job.slot_waits FORCE ROW LEVEL SECURITY;

CREATE POLICY taker ON durable_job.slot_waits USING (current_user = (SELECT pg_catalog.pg_get_userbyid(n.nspowner) FROM pg_catalog.pg_namespace n WHERE n.nspname = 'durable_job')) WITH CHECK (current_user = (SELECT pg_catalog.pg_get_userbyid(n.nspowner) FROM pg_catalog.pg_namespace n WHERE n.nspname = 'durable_job'));

CREATE POLICY reads ON durable_job.slot_waits FOR SELECT USING (EXISTS (SELECT 1 FROM durable_job.jobs j WHERE j.job_id = slot_waits.job_id));

CREATE FUNCTION durable_job.take_slot(want_endpoint text, want_model text, want_tokens bigint, want_job text) RETURNS double precision LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$ DECLARE l record; t timestamptz; n bigint; used bigint; wait double precision := 0; freed timestamptz; stamp text; BEGIN SELECT x.requests_per_minute, x.tokens_per_minute INTO l FROM durable_job.limits x WHERE x.endpoint = want_endpoint AND x.model = want_model; IF NOT FOUND THEN RETURN 0; END IF; IF want_tokens IS NULL OR want_tokens < 0 THEN RAISE EXCEPTION 'durable_job.take_slot: a call''s tokens are a count, not %', want_tokens USING ERRCODE = 'invalid_parameter_value'; END IF; IF NOT durable_job.runs(want_job) THEN RAISE EXCEPTION 'durable_job.take_slot: role % runs no job %', session_user, want_job USING ERRCODE = 'insufficient_privilege'; END IF; PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended('durable_job.slots ' || want_endpoint || ' ' || want_model, 48)); t := pg_catalog.clock_timestamp(); DELETE FROM durable_job.slots s WHERE s.endpoint = want_endpoint AND s.model = want_model AND s.taken_at <= t - interval '120 seconds'; SELECT pg_catalog.count(*), COALESCE(pg_catalog.sum(s.tokens), 0) INTO n, used FROM durable_job.slots s WHERE s.endpoint = want_endpoint AND s.model = want_model AND s.taken_at > t - interval '61 seconds'; IF n >= l.requests_per_minute THEN SELECT s.taken_at INTO freed FROM durable_job.slots s WHERE s.endpoint = want_endpoint AND s.model = want_model AND s.taken_at > t - interval '61 seconds' ORDER BY s.taken_at OFFSET n - l.requests_per_minute LIMIT 1; wait := pg_catalog.date_part('epoch', freed + interval '61 seconds' - t); END IF; IF l.tokens_per_minute IS NOT NULL AND n > 0 AND used + want_tokens > l.tokens_per_minute THEN SELECT c.taken_at INTO freed FROM (SELECT s.taken_at, pg_catalog.sum(s.tokens) OVER (ORDER BY s.taken_at, s.id) AS gone FROM durable_job.slots s WHERE s.endpoint = want_endpoint AND s.model = want_model AND s.taken_at > t - interval '61 seconds') c WHERE used - c.gone + want_tokens <= l.tokens_per_minute ORDER BY c.taken_at LIMIT 1; wait := GREATEST(wait, pg_catalog.date_part('epoch', freed + interval '61 seconds' - t)); END IF; stamp := pg_catalog.to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'); IF wait > 0 THEN INSERT INTO durable_job.slot_waits (job_id, endpoint, model, since_utc, until_utc) VALUES (want_job, want_endpoint, want_model, stamp, pg_catalog.to_char((t + pg_catalog.make_interval(secs => wait)) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')) ON CONFLICT (job_id) DO UPDATE SET endpoint = excluded.endpoint, model = excluded.model, until_utc = excluded.until_utc; RETURN wait; END IF; INSERT INTO durable_job.slots (endpoint, model, tokens, job_id, principal, taken_at) VALUES (want_endpoint, want_model, want_tokens, want_job, session_user, t); DELETE FROM durable_job.slot_waits w WHERE w.job_id = want_job; RETURN 0; END $$;

REVOKE ALL ON FUNCTION durable_job.take_slot(text, text, bigint, text) FROM PUBLIC;

DO $$ DECLARE r record; BEGIN FOR r IN SELECT role FROM durable_job.roles LOOP EXECUTE pg_catalog.format('GRANT SELECT ON durable_job.limits, durable_job.slots, durable_job.slot_waits TO %I', r.role); EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION durable_job.take_slot(text, text, bigint, text) TO %I', r.role); END LOOP; END $$;
