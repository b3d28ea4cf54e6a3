-- m015_sealed: sealed at rest (issue 36). `sealing`: the store's own mark that it seals every new job, made by a migrate run with a key-encryption key (its id, never the key). `data_keys`: each sealed job's data key, wrapped under the key-encryption key kek_id names; read as the job's other rows; added once, by the job's owner, in the transaction that seals the job (before its first link); emptied (shred) or rewrapped (rotate-key) by the store's administrator alone: no other role is granted UPDATE or DELETE, and the policies let no other role change a row.
-- Released: this text never changes (tests/test_house.py hashes it); a change is a new migration.

CREATE TABLE durable_job.sealing (one BOOLEAN PRIMARY KEY DEFAULT true CHECK (one), kek_id TEXT NOT NULL, since_utc TEXT NOT NULL);

ALTER TABLE durable_job.sealing ENABLE ROW LEVEL SECURITY;

ALTER TABLE durable_job.sealing FORCE ROW LEVEL SECURITY;

CREATE POLICY admin ON durable_job.sealing USING ((SELECT durable_job.is_admin())) WITH CHECK ((SELECT durable_job.is_admin()));

CREATE POLICY reads ON durable_job.sealing FOR SELECT USING (true);

CREATE TABLE durable_job.data_keys (job_id TEXT PRIMARY KEY REFERENCES durable_job.jobs, kek_id TEXT NOT NULL, wrapped TEXT, created_utc TEXT NOT NULL, shredded_utc TEXT, shredded_by TEXT, CHECK ((wrapped IS NULL) = (shredded_utc IS NOT NULL)));

ALTER TABLE durable_job.data_keys ENABLE ROW LEVEL SECURITY;

ALTER TABLE durable_job.data_keys FORCE ROW LEVEL SECURITY;

CREATE POLICY admin ON durable_job.data_keys USING ((SELECT durable_job.is_admin())) WITH CHECK ((SELECT durable_job.is_admin()));

CREATE POLICY reads ON durable_job.data_keys FOR SELECT USING (EXISTS (SELECT 1 FROM durable_job.jobs j WHERE j.job_id = data_keys.job_id));

CREATE POLICY adds ON durable_job.data_keys FOR INSERT WITH CHECK (shredded_utc IS NULL AND EXISTS (SELECT 1 FROM durable_job.jobs j WHERE j.job_id = data_keys.job_id AND j.owner = session_user) AND NOT EXISTS (SELECT 1 FROM durable_job.links l WHERE l.job_id = data_keys.job_id));

CREATE TRIGGER notify_change AFTER INSERT OR UPDATE OR DELETE ON durable_job.data_keys FOR EACH STATEMENT EXECUTE FUNCTION durable_job.notify_change();

DO $$ DECLARE r record; BEGIN FOR r IN SELECT role FROM durable_job.roles LOOP EXECUTE pg_catalog.format('GRANT SELECT ON durable_job.sealing, durable_job.data_keys TO %I', r.role); EXECUTE pg_catalog.format('GRANT INSERT ON durable_job.data_keys TO %I', r.role); END LOOP; END $$;
