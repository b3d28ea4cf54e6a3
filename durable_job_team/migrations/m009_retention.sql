-- m009_retention: prune's records and delete's tombstones, the administrator's alone; a tombstoned jobId stays taken.
-- Released: this text never changes (tests/test_house.py hashes it); a change is a new migration.

CREATE TABLE durable_job.prunes (job_id TEXT PRIMARY KEY REFERENCES durable_job.jobs, record_json TEXT NOT NULL, marked_at timestamptz NOT NULL DEFAULT now());

CREATE TABLE durable_job.tombstones (job_id TEXT PRIMARY KEY, deleted_at timestamptz NOT NULL DEFAULT now(), principal TEXT NOT NULL DEFAULT session_user, receipt_sha256 TEXT);

ALTER TABLE durable_job.prunes ENABLE ROW LEVEL SECURITY;

ALTER TABLE durable_job.prunes FORCE ROW LEVEL SECURITY;

CREATE POLICY admin ON durable_job.prunes USING ((SELECT durable_job.is_admin())) WITH CHECK ((SELECT durable_job.is_admin()));

ALTER TABLE durable_job.tombstones ENABLE ROW LEVEL SECURITY;

ALTER TABLE durable_job.tombstones FORCE ROW LEVEL SECURITY;

CREATE POLICY admin ON durable_job.tombstones USING ((SELECT durable_job.is_admin())) WITH CHECK ((SELECT durable_job.is_admin()));

CREATE POLICY reads ON durable_job.prunes FOR SELECT USING (EXISTS (SELECT 1 FROM durable_job.jobs j WHERE j.job_id = prunes.job_id));

CREATE POLICY checks ON durable_job.tombstones FOR SELECT USING (current_user = (SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = 'durable_job'));

CREATE FUNCTION durable_job.refuse_tombstoned() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$ BEGIN IF EXISTS (SELECT 1 FROM durable_job.tombstones t WHERE t.job_id = NEW.job_id) THEN RAISE EXCEPTION 'durable_job.jobs: jobId % was deleted and stays taken', NEW.job_id USING ERRCODE = 'unique_violation'; END IF; RETURN NEW; END $$;

REVOKE ALL ON FUNCTION durable_job.refuse_tombstoned() FROM PUBLIC;

CREATE FUNCTION durable_job.tombstoned(job text) RETURNS boolean LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog AS $$ SELECT EXISTS (SELECT 1 FROM durable_job.tombstones t WHERE t.job_id = job) $$;

CREATE TRIGGER tombstoned BEFORE INSERT ON durable_job.jobs FOR EACH ROW EXECUTE FUNCTION durable_job.refuse_tombstoned();

DO $$ DECLARE r record; BEGIN FOR r IN SELECT role FROM durable_job.roles LOOP EXECUTE format('GRANT SELECT ON durable_job.prunes TO %I', r.role); END LOOP; END $$;
