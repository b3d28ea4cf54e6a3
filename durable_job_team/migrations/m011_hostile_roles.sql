-- m011_hostile_roles: every function with a fixed search_path (pg_catalog, pg_temp) and schema-qualified names; a finished job's history closed; a receipt only as the journal says (issue 30).
-- Released: this text never changes (tests/test_house.py hashes it); a change is a new migration.

CREATE OR REPLACE FUNCTION durable_job.is_admin() RETURNS boolean LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT session_user = pg_catalog.pg_get_userbyid(n.nspowner) OR (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = session_user) FROM pg_catalog.pg_namespace n WHERE n.nspname = 'durable_job' $$;

CREATE OR REPLACE FUNCTION durable_job.is_kind(k text) RETURNS boolean LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT EXISTS (SELECT 1 FROM durable_job.roles r WHERE r.role = session_user::text AND r.kind = k) $$;

CREATE OR REPLACE FUNCTION durable_job.runs(job text) RETURNS boolean LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT EXISTS (SELECT 1 FROM durable_job.jobs j WHERE j.job_id = job AND (j.owner = session_user::text OR durable_job.is_kind('worker'))) $$;

CREATE OR REPLACE FUNCTION durable_job.tends(job text) RETURNS boolean LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT EXISTS (SELECT 1 FROM durable_job.jobs j WHERE j.job_id = job AND durable_job.is_kind('person') AND (j.owner = session_user::text OR session_user::text = ANY (j.reviewers))) $$;

CREATE OR REPLACE FUNCTION durable_job.decides(job text) RETURNS boolean LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT EXISTS (SELECT 1 FROM durable_job.jobs j WHERE j.job_id = job AND durable_job.is_kind('person') AND CASE WHEN pg_catalog.cardinality(j.reviewers) > 0 THEN session_user::text = ANY (j.reviewers) AND j.owner <> session_user::text ELSE j.owner = session_user::text END) $$;

CREATE OR REPLACE FUNCTION durable_job.job_of(thread text) RETURNS text LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT j.job_id FROM durable_job.jobs j WHERE j.thread_id = thread $$;

CREATE OR REPLACE FUNCTION durable_job.stamp() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$ BEGIN IF NOT durable_job.is_admin() THEN NEW.principal := session_user; NEW.recorded_at := pg_catalog.now(); END IF; RETURN NEW; END $$;

CREATE OR REPLACE FUNCTION durable_job.stamp_job() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$ BEGIN IF NOT durable_job.is_admin() THEN NEW.owner := session_user; NEW.sealed_at := pg_catalog.now(); END IF; RETURN NEW; END $$;

CREATE OR REPLACE FUNCTION durable_job.history() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$ BEGIN IF durable_job.is_admin() THEN RETURN COALESCE(NEW, OLD); END IF; RAISE EXCEPTION 'durable_job.% is history: its rows are written once and never changed or removed (% refused)', TG_TABLE_NAME, TG_OP USING ERRCODE = 'insufficient_privilege'; END $$;

CREATE OR REPLACE FUNCTION durable_job.call_change() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$ BEGIN IF durable_job.is_admin() THEN RETURN COALESCE(NEW, OLD); END IF; IF OLD.status <> 'pending' THEN RAISE EXCEPTION 'durable_job.calls: call % is %, and only a pending call changes', OLD.operation_key, OLD.status USING ERRCODE = 'insufficient_privilege'; END IF; IF TG_OP = 'DELETE' THEN IF NOT EXISTS (SELECT 1 FROM durable_job.call_events n WHERE n.job_id = OLD.job_id AND n.operation_key = OLD.operation_key AND n.event = 'not-sent' AND n.id > (SELECT pg_catalog.max(d.id) FROM durable_job.call_events d WHERE d.job_id = OLD.job_id AND d.operation_key = OLD.operation_key AND d.event = 'dispatch')) THEN RAISE EXCEPTION 'durable_job.calls: call % may be removed only beside its not-sent event', OLD.operation_key USING ERRCODE = 'insufficient_privilege'; END IF; RETURN OLD; END IF; IF (NEW.job_id, NEW.operation_key, NEW.base_key, NEW.attempt, NEW.item_id, NEW.input_sha256, NEW.created_utc, NEW.principal, NEW.recorded_at) IS DISTINCT FROM (OLD.job_id, OLD.operation_key, OLD.base_key, OLD.attempt, OLD.item_id, OLD.input_sha256, OLD.created_utc, OLD.principal, OLD.recorded_at) OR NEW.status NOT IN ('pending', 'completed', 'abandoned', 'rejected') THEN RAISE EXCEPTION 'durable_job.calls: call % may change only its outcome', OLD.operation_key USING ERRCODE = 'insufficient_privilege'; END IF; IF NEW.reconciliation_json IS DISTINCT FROM OLD.reconciliation_json AND NEW.status IN ('completed', 'abandoned') AND NOT durable_job.tends(NEW.job_id) THEN RAISE EXCEPTION 'durable_job.calls: only the job''s owner or a reviewer reconciles call %', OLD.operation_key USING ERRCODE = 'insufficient_privilege'; END IF; RETURN NEW; END $$;

CREATE OR REPLACE FUNCTION durable_job.write_change() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$ BEGIN IF durable_job.is_admin() OR (OLD.channel IN ('__error__', '__scheduled__', '__interrupt__', '__resume__') AND NEW.channel = OLD.channel AND (NEW.thread_id, NEW.checkpoint_ns, NEW.checkpoint_id, NEW.task_id, NEW.idx, NEW.task_path) IS NOT DISTINCT FROM (OLD.thread_id, OLD.checkpoint_ns, OLD.checkpoint_id, OLD.task_id, OLD.idx, OLD.task_path)) THEN RETURN NEW; END IF; RAISE EXCEPTION 'durable_job.checkpoint_writes is history: only a task''s own error, interrupt or resume write is replaced' USING ERRCODE = 'insufficient_privilege'; END $$;

CREATE OR REPLACE FUNCTION durable_job.event_check() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$ BEGIN IF NEW.event IN ('reconciled', 'retry') AND NOT durable_job.is_admin() AND NOT durable_job.tends(NEW.job_id) THEN RAISE EXCEPTION 'durable_job.call_events: only the job''s owner or a reviewer may %', NEW.event USING ERRCODE = 'insufficient_privilege'; END IF; RETURN NEW; END $$;

CREATE OR REPLACE FUNCTION durable_job.notify_change() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$ BEGIN PERFORM pg_catalog.pg_notify('durable_job', ''); RETURN NULL; END $$;

CREATE OR REPLACE FUNCTION durable_job.job_change() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$ BEGIN IF durable_job.is_admin() THEN RETURN COALESCE(NEW, OLD); END IF; IF TG_OP = 'UPDATE' AND current_user = (SELECT pg_catalog.pg_get_userbyid(n.nspowner) FROM pg_catalog.pg_namespace n WHERE n.nspname = 'durable_job') AND OLD.finished_at IS NULL AND NEW.finished_at IS NOT NULL AND (pg_catalog.to_jsonb(NEW) - 'finished_at') = (pg_catalog.to_jsonb(OLD) - 'finished_at') THEN RETURN NEW; END IF; RAISE EXCEPTION 'durable_job.jobs is history: its rows are written once and never changed or removed (% refused)', TG_OP USING ERRCODE = 'insufficient_privilege'; END $$;

CREATE OR REPLACE FUNCTION durable_job.finish_job() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$ BEGIN UPDATE durable_job.jobs SET finished_at = pg_catalog.now() WHERE job_id = NEW.job_id AND finished_at IS NULL; RETURN NULL; END $$;

CREATE OR REPLACE FUNCTION durable_job.refuse_tombstoned() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$ BEGIN IF EXISTS (SELECT 1 FROM durable_job.tombstones t WHERE t.job_id = NEW.job_id) THEN RAISE EXCEPTION 'durable_job.jobs: jobId % was deleted and stays taken', NEW.job_id USING ERRCODE = 'unique_violation'; END IF; RETURN NEW; END $$;

CREATE OR REPLACE FUNCTION durable_job.tombstoned(job text) RETURNS boolean LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$ SELECT EXISTS (SELECT 1 FROM durable_job.tombstones t WHERE t.job_id = job) $$;

CREATE FUNCTION durable_job.refuse_finished() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$ DECLARE job text; ended timestamptz; settling boolean := false; BEGIN IF durable_job.is_admin() THEN RETURN NEW; END IF; IF TG_TABLE_NAME IN ('checkpoints', 'checkpoint_blobs', 'checkpoint_writes') THEN SELECT j.job_id, j.finished_at INTO job, ended FROM durable_job.jobs j WHERE j.thread_id = NEW.thread_id; ELSE SELECT j.job_id, j.finished_at INTO job, ended FROM durable_job.jobs j WHERE j.job_id = NEW.job_id; END IF; IF ended IS NULL THEN RETURN NEW; END IF; IF EXISTS (SELECT 1 FROM durable_job.outcomes o WHERE o.job_id = job AND o.kind = 'cancel') AND durable_job.tends(job) THEN IF TG_TABLE_NAME = 'calls' THEN settling := TG_OP = 'UPDATE' AND NEW.reconciliation_json IS DISTINCT FROM OLD.reconciliation_json; ELSIF TG_TABLE_NAME = 'call_events' THEN settling := NEW.event = 'reconciled'; ELSIF TG_TABLE_NAME = 'links' THEN settling := NEW.tbl IN ('calls', 'call_events'); END IF; END IF; IF settling THEN RETURN NEW; END IF; RAISE EXCEPTION 'durable_job.%: job % is finished (its receipt was written at %): its history takes nothing more', TG_TABLE_NAME, job, ended USING ERRCODE = 'insufficient_privilege'; END $$;

CREATE TRIGGER refuse_finished BEFORE INSERT ON durable_job.call_events FOR EACH ROW EXECUTE FUNCTION durable_job.refuse_finished();

CREATE TRIGGER refuse_finished BEFORE INSERT ON durable_job.drafts FOR EACH ROW EXECUTE FUNCTION durable_job.refuse_finished();

CREATE TRIGGER refuse_finished BEFORE INSERT ON durable_job.outcomes FOR EACH ROW EXECUTE FUNCTION durable_job.refuse_finished();

CREATE TRIGGER refuse_finished BEFORE INSERT ON durable_job.decisions FOR EACH ROW EXECUTE FUNCTION durable_job.refuse_finished();

CREATE TRIGGER refuse_finished BEFORE INSERT ON durable_job.links FOR EACH ROW EXECUTE FUNCTION durable_job.refuse_finished();

CREATE TRIGGER refuse_finished BEFORE INSERT ON durable_job.checkpoint_blobs FOR EACH ROW EXECUTE FUNCTION durable_job.refuse_finished();

CREATE TRIGGER refuse_finished BEFORE INSERT OR UPDATE ON durable_job.calls FOR EACH ROW EXECUTE FUNCTION durable_job.refuse_finished();

CREATE TRIGGER refuse_finished BEFORE INSERT OR UPDATE ON durable_job.checkpoints FOR EACH ROW EXECUTE FUNCTION durable_job.refuse_finished();

CREATE TRIGGER refuse_finished BEFORE INSERT OR UPDATE ON durable_job.checkpoint_writes FOR EACH ROW EXECUTE FUNCTION durable_job.refuse_finished();

CREATE FUNCTION durable_job.receipt_check() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$ DECLARE r jsonb; j record; d record; c record; l record; BEGIN IF durable_job.is_admin() THEN RETURN NEW; END IF; SELECT x.record_json, x.finished_at INTO j FROM durable_job.jobs x WHERE x.job_id = NEW.job_id; IF NOT FOUND THEN RETURN NEW; END IF; BEGIN r := NEW.receipt_json::jsonb; EXCEPTION WHEN others THEN r := NULL; END; IF r IS NULL OR pg_catalog.jsonb_typeof(r) <> 'object' THEN RAISE EXCEPTION 'durable_job.receipts: the receipt of job % is not a JSON object', NEW.job_id USING ERRCODE = 'check_violation'; END IF; IF j.finished_at IS NOT NULL THEN RAISE EXCEPTION 'durable_job.receipts: job % already has its receipt', NEW.job_id USING ERRCODE = 'unique_violation'; END IF; IF r ->> 'jobId' IS DISTINCT FROM NEW.job_id OR r ->> 'codeSha256' IS DISTINCT FROM (j.record_json::jsonb ->> 'codeSha256') THEN RAISE EXCEPTION 'durable_job.receipts: the receipt names job % of program %, not job % of the program that sealed it', r ->> 'jobId', r ->> 'codeSha256', NEW.job_id USING ERRCODE = 'check_violation'; END IF; SELECT o.principal INTO c FROM durable_job.outcomes o WHERE o.job_id = NEW.job_id AND o.kind = 'cancel'; IF FOUND THEN IF r ->> 'outcome' IS DISTINCT FROM 'cancelled' OR r -> 'cancel' ->> 'principal' IS DISTINCT FROM c.principal THEN RAISE EXCEPTION 'durable_job.receipts: job % was cancelled by %, and the receipt says otherwise', NEW.job_id, c.principal USING ERRCODE = 'check_violation'; END IF; ELSE SELECT x.decision, x.principal INTO d FROM durable_job.decisions x WHERE x.job_id = NEW.job_id AND x.kind = 'decision'; IF NOT FOUND THEN RAISE EXCEPTION 'durable_job.receipts: job % has no decision or cancel recorded: no receipt yet', NEW.job_id USING ERRCODE = 'check_violation'; END IF; IF r ->> 'outcome' IS DISTINCT FROM 'decided' OR r ->> 'decision' IS DISTINCT FROM d.decision OR r -> 'final' ->> 'decision' IS DISTINCT FROM d.decision OR r ->> 'principal' IS DISTINCT FROM d.principal OR r -> 'final' ->> 'principal' IS DISTINCT FROM d.principal THEN RAISE EXCEPTION 'durable_job.receipts: job % was decided % by %, and the receipt says otherwise', NEW.job_id, d.decision, d.principal USING ERRCODE = 'check_violation'; END IF; END IF; SELECT k.seq, k.act, k.prev_sha256 INTO l FROM durable_job.links k WHERE k.job_id = NEW.job_id ORDER BY k.seq DESC LIMIT 1; IF FOUND AND (l.act <> 'receipt' OR r -> 'chainHead' ->> 'seq' IS DISTINCT FROM (l.seq - 1)::text OR r -> 'chainHead' ->> 'sha256' IS DISTINCT FROM l.prev_sha256) THEN RAISE EXCEPTION 'durable_job.receipts: the receipt of job % does not bind its history: its own link must be the newest', NEW.job_id USING ERRCODE = 'check_violation'; END IF; RETURN NEW; END $$;

CREATE TRIGGER receipt_check BEFORE INSERT ON durable_job.receipts FOR EACH ROW EXECUTE FUNCTION durable_job.receipt_check();

REVOKE ALL ON FUNCTION durable_job.stamp() FROM PUBLIC;

REVOKE ALL ON FUNCTION durable_job.stamp_job() FROM PUBLIC;

REVOKE ALL ON FUNCTION durable_job.history() FROM PUBLIC;

REVOKE ALL ON FUNCTION durable_job.call_change() FROM PUBLIC;

REVOKE ALL ON FUNCTION durable_job.write_change() FROM PUBLIC;

REVOKE ALL ON FUNCTION durable_job.event_check() FROM PUBLIC;

REVOKE ALL ON FUNCTION durable_job.notify_change() FROM PUBLIC;

REVOKE ALL ON FUNCTION durable_job.job_change() FROM PUBLIC;

REVOKE ALL ON FUNCTION durable_job.refuse_finished() FROM PUBLIC;

REVOKE ALL ON FUNCTION durable_job.receipt_check() FROM PUBLIC;

REVOKE ALL ON FUNCTION durable_job.tombstoned(text) FROM PUBLIC;

-- the roles granted before this migration: tombstoned() stays theirs to call, and CONNECT on the store's database is
-- theirs by grant, so that an administrator may revoke it from PUBLIC (docs/team-store.md) without locking them out
DO $$ DECLARE r record; BEGIN FOR r IN SELECT role FROM durable_job.roles LOOP EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION durable_job.tombstoned(text) TO %I', r.role); EXECUTE pg_catalog.format('GRANT CONNECT ON DATABASE %I TO %I', pg_catalog.current_database(), r.role); END LOOP; END $$;
