-- m014_outbox: notifications (issue 35), each added in the transaction of the act that causes it: read as the job's other rows, added by whoever may act on the job, their principal stamped; a sender (the administrator or a worker role) changes only a row's delivery fields, nobody but the administrator removes one.
-- Released: this text never changes (tests/test_house.py hashes it); a change is a new migration.

CREATE TABLE durable_job.outbox (id TEXT NOT NULL, event TEXT NOT NULL, payload_json TEXT NOT NULL, created_utc TEXT NOT NULL, tries INTEGER NOT NULL DEFAULT 0, next_try_utc TEXT, delivered_utc TEXT, last_error TEXT, principal TEXT NOT NULL DEFAULT session_user, recorded_at TIMESTAMPTZ NOT NULL DEFAULT now(), job_id TEXT NOT NULL REFERENCES durable_job.jobs, PRIMARY KEY (job_id, id));

CREATE INDEX outbox_due ON durable_job.outbox (created_utc) WHERE delivered_utc IS NULL;

ALTER TABLE durable_job.outbox ENABLE ROW LEVEL SECURITY;

ALTER TABLE durable_job.outbox FORCE ROW LEVEL SECURITY;

CREATE POLICY admin ON durable_job.outbox USING ((SELECT durable_job.is_admin())) WITH CHECK ((SELECT durable_job.is_admin()));

CREATE POLICY reads ON durable_job.outbox FOR SELECT USING (EXISTS (SELECT 1 FROM durable_job.jobs j WHERE j.job_id = outbox.job_id));

CREATE POLICY adds ON durable_job.outbox FOR INSERT WITH CHECK (durable_job.runs(job_id) OR durable_job.tends(job_id) OR durable_job.decides(job_id));

CREATE POLICY sends ON durable_job.outbox FOR UPDATE USING ((SELECT durable_job.is_kind('worker'))) WITH CHECK ((SELECT durable_job.is_kind('worker')));

CREATE FUNCTION durable_job.outbox_change() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$ BEGIN IF durable_job.is_admin() THEN RETURN COALESCE(NEW, OLD); END IF; IF TG_OP = 'DELETE' OR (NEW.job_id, NEW.id, NEW.event, NEW.payload_json, NEW.created_utc, NEW.principal, NEW.recorded_at) IS DISTINCT FROM (OLD.job_id, OLD.id, OLD.event, OLD.payload_json, OLD.created_utc, OLD.principal, OLD.recorded_at) THEN RAISE EXCEPTION 'durable_job.outbox: a notification is written once; a sender changes only its delivery (tries, next_try_utc, delivered_utc, last_error)' USING ERRCODE = 'insufficient_privilege'; END IF; RETURN NEW; END $$;

REVOKE ALL ON FUNCTION durable_job.outbox_change() FROM PUBLIC;

CREATE TRIGGER outbox_change BEFORE UPDATE OR DELETE ON durable_job.outbox FOR EACH ROW EXECUTE FUNCTION durable_job.outbox_change();

CREATE TRIGGER stamp BEFORE INSERT ON durable_job.outbox FOR EACH ROW EXECUTE FUNCTION durable_job.stamp();

CREATE TRIGGER notify_change AFTER INSERT ON durable_job.outbox FOR EACH STATEMENT EXECUTE FUNCTION durable_job.notify_change();

DO $$ DECLARE r record; BEGIN FOR r IN SELECT role FROM durable_job.roles LOOP EXECUTE pg_catalog.format('GRANT SELECT, INSERT, UPDATE ON durable_job.outbox TO %I', r.role); END LOOP; END $$;
