-- m019_current_key: a new job is sealed only under the store's current key-encryption key (issue 43). `retired_keys`: each key a rotate-key rotated out (its id, never the key), when, and the key that replaced it; written by the store's administrator alone (rotate-key), read by every role. A data key is added only under a key that was not rotated out and, in a store that seals every new job, only under the key its `sealing` row names (a restrictive policy: it holds for every role, the administrator's too).
-- Released: this text never changes (tests/test_house.py hashes it); a change is a new migration.

CREATE TABLE durable_job.retired_keys (kek_id TEXT PRIMARY KEY, retired_utc TEXT NOT NULL, replaced_by TEXT NOT NULL);

ALTER TABLE durable_job.retired_keys ENABLE ROW LEVEL SECURITY;

ALTER TABLE durable_job.retired_keys FORCE ROW LEVEL SECURITY;

CREATE POLICY admin ON durable_job.retired_keys USING ((SELECT durable_job.is_admin())) WITH CHECK ((SELECT durable_job.is_admin()));

CREATE POLICY reads ON durable_job.retired_keys FOR SELECT USING (true);

CREATE POLICY current_key ON durable_job.data_keys AS RESTRICTIVE FOR INSERT WITH CHECK (NOT EXISTS (SELECT 1 FROM durable_job.retired_keys r WHERE r.kek_id = data_keys.kek_id) AND NOT EXISTS (SELECT 1 FROM durable_job.sealing s WHERE s.kek_id <> data_keys.kek_id));

DO $$ DECLARE r record; BEGIN FOR r IN SELECT role FROM durable_job.roles LOOP EXECUTE pg_catalog.format('GRANT SELECT ON durable_job.retired_keys TO %I', r.role); END LOOP; END $$;
