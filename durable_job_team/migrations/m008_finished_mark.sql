-- m008_finished_mark: a finished job marked in its own row by the database, in its receipt's transaction; a worker's claim reads the unfinished through a partial index.
-- Released: this text never changes (tests/test_house.py hashes it); a change is a new migration.

ALTER TABLE durable_job.jobs ADD COLUMN finished_at timestamptz;

UPDATE durable_job.jobs j SET finished_at = now() WHERE EXISTS (SELECT 1 FROM durable_job.receipts r WHERE r.job_id = j.job_id);

CREATE INDEX jobs_unfinished ON durable_job.jobs (created_utc, job_id) WHERE finished_at IS NULL;

CREATE FUNCTION durable_job.job_change() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF durable_job.is_admin() THEN RETURN COALESCE(NEW, OLD); END IF; IF TG_OP = 'UPDATE' AND current_user = (SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = 'durable_job') AND OLD.finished_at IS NULL AND NEW.finished_at IS NOT NULL AND (to_jsonb(NEW) - 'finished_at') = (to_jsonb(OLD) - 'finished_at') THEN RETURN NEW; END IF; RAISE EXCEPTION 'durable_job.jobs is history: its rows are written once and never changed or removed (% refused)', TG_OP USING ERRCODE = 'insufficient_privilege'; END $$;

DROP TRIGGER history ON durable_job.jobs;

CREATE TRIGGER history BEFORE UPDATE OR DELETE ON durable_job.jobs FOR EACH ROW EXECUTE FUNCTION durable_job.job_change();

CREATE FUNCTION durable_job.finish_job() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$ BEGIN UPDATE durable_job.jobs SET finished_at = now() WHERE job_id = NEW.job_id AND finished_at IS NULL; RETURN NULL; END $$;

REVOKE ALL ON FUNCTION durable_job.finish_job() FROM PUBLIC;

CREATE POLICY finishes ON durable_job.jobs FOR UPDATE USING (current_user = (SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = 'durable_job'));

CREATE TRIGGER finish_job AFTER INSERT ON durable_job.receipts FOR EACH ROW EXECUTE FUNCTION durable_job.finish_job();
