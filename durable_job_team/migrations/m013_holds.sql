-- m013_holds: a run's refusal recorded on its job (a hold: who, when, the message, the fix, the program that met it), one a job: read as the job's other rows, written by whoever may run or tend the job, lifted (release, the owner's resume) only by its owner or reviewers, never by a worker.
-- Released: this text never changes (tests/test_house.py hashes it); a change is a new migration.

CREATE TABLE durable_job.holds (kind TEXT NOT NULL CHECK (kind = 'hold'), principal TEXT NOT NULL DEFAULT session_user, at_utc TEXT NOT NULL, message TEXT NOT NULL, fix TEXT NOT NULL, program TEXT NOT NULL, recorded_at TIMESTAMPTZ NOT NULL DEFAULT now(), job_id TEXT NOT NULL REFERENCES durable_job.jobs, PRIMARY KEY (job_id, kind));

ALTER TABLE durable_job.holds ENABLE ROW LEVEL SECURITY;

ALTER TABLE durable_job.holds FORCE ROW LEVEL SECURITY;

CREATE POLICY admin ON durable_job.holds USING ((SELECT durable_job.is_admin())) WITH CHECK ((SELECT durable_job.is_admin()));

CREATE POLICY reads ON durable_job.holds FOR SELECT USING (EXISTS (SELECT 1 FROM durable_job.jobs j WHERE j.job_id = holds.job_id));

CREATE POLICY adds ON durable_job.holds FOR INSERT WITH CHECK (durable_job.runs(job_id) OR durable_job.tends(job_id));

CREATE POLICY changes ON durable_job.holds FOR UPDATE USING (durable_job.runs(job_id) OR durable_job.tends(job_id)) WITH CHECK (durable_job.runs(job_id) OR durable_job.tends(job_id));

CREATE POLICY lifts ON durable_job.holds FOR DELETE USING (durable_job.tends(job_id));

CREATE TRIGGER stamp BEFORE INSERT OR UPDATE ON durable_job.holds FOR EACH ROW EXECUTE FUNCTION durable_job.stamp();

CREATE TRIGGER notify_change AFTER INSERT OR UPDATE OR DELETE ON durable_job.holds FOR EACH STATEMENT EXECUTE FUNCTION durable_job.notify_change();

DO $$ DECLARE r record; BEGIN FOR r IN SELECT role FROM durable_job.roles LOOP EXECUTE pg_catalog.format('GRANT SELECT, INSERT, UPDATE, DELETE ON durable_job.holds TO %I', r.role); END LOOP; END $$;
