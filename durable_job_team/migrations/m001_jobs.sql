-- m001_jobs: the jobs: each job's sealed record, its manifest's and sources' bytes.
-- Released: this text never changes (tests/test_house.py hashes it); a change is a new migration.

CREATE TABLE durable_job.jobs (job_id TEXT PRIMARY KEY, thread_id TEXT NOT NULL UNIQUE, record_json TEXT NOT NULL, manifest BYTEA NOT NULL, manifest_sha256 TEXT NOT NULL, sources BYTEA[] NOT NULL, created_utc TEXT NOT NULL);
