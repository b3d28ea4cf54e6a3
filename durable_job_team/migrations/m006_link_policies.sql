-- m006_link_policies: the chained history under the same rules: read as the job's other rows, added by whoever may act on the job, never changed.
-- Released: this text never changes (tests/test_house.py hashes it); a change is a new migration.

ALTER TABLE durable_job.links ENABLE ROW LEVEL SECURITY;

ALTER TABLE durable_job.links FORCE ROW LEVEL SECURITY;

CREATE POLICY admin ON durable_job.links USING ((SELECT durable_job.is_admin())) WITH CHECK ((SELECT durable_job.is_admin()));

CREATE POLICY reads ON durable_job.links FOR SELECT USING (EXISTS (SELECT 1 FROM durable_job.jobs j WHERE j.job_id = links.job_id));

CREATE POLICY adds ON durable_job.links FOR INSERT WITH CHECK (durable_job.runs(job_id) OR durable_job.tends(job_id) OR durable_job.decides(job_id));

CREATE TRIGGER history BEFORE UPDATE OR DELETE ON durable_job.links FOR EACH ROW EXECUTE FUNCTION durable_job.history();
