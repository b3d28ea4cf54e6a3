-- m005_links: the chained history (a store's roles granted before it get its two rights at once).
-- Released: this text never changes (tests/test_house.py hashes it); a change is a new migration.

CREATE TABLE durable_job.links (seq INTEGER NOT NULL, act TEXT NOT NULL, tbl TEXT NOT NULL, row_key TEXT NOT NULL, record_json TEXT NOT NULL, prev_sha256 TEXT NOT NULL, link_sha256 TEXT NOT NULL, at_utc TEXT NOT NULL, job_id TEXT NOT NULL REFERENCES durable_job.jobs, PRIMARY KEY (job_id, seq));

DO $$ DECLARE r record; BEGIN FOR r IN SELECT role FROM durable_job.roles LOOP EXECUTE format('GRANT SELECT, INSERT ON durable_job.links TO %I', r.role); END LOOP; END $$;
