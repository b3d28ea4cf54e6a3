-- m003_identity: who did each act (principal, recorded_at, stamped by the database), the owner and reviewers of every job, the decisions, the writers' lock rows.
-- Released: this text never changes (tests/test_house.py hashes it); a change is a new migration.

CREATE TABLE durable_job.roles (role TEXT PRIMARY KEY, kind TEXT NOT NULL CHECK (kind IN ('person', 'worker')), granted_at TIMESTAMPTZ NOT NULL DEFAULT now());

ALTER TABLE durable_job.jobs ADD COLUMN owner TEXT NOT NULL DEFAULT session_user, ADD COLUMN reviewers TEXT[] NOT NULL DEFAULT '{}', ADD COLUMN sealed_at TIMESTAMPTZ NOT NULL DEFAULT now();

ALTER TABLE durable_job.calls ADD COLUMN principal TEXT NOT NULL DEFAULT session_user, ADD COLUMN recorded_at TIMESTAMPTZ NOT NULL DEFAULT now();

ALTER TABLE durable_job.call_events ADD COLUMN principal TEXT NOT NULL DEFAULT session_user, ADD COLUMN recorded_at TIMESTAMPTZ NOT NULL DEFAULT now();

ALTER TABLE durable_job.drafts ADD COLUMN principal TEXT NOT NULL DEFAULT session_user, ADD COLUMN recorded_at TIMESTAMPTZ NOT NULL DEFAULT now();

ALTER TABLE durable_job.outcomes ADD COLUMN principal TEXT NOT NULL DEFAULT session_user, ADD COLUMN recorded_at TIMESTAMPTZ NOT NULL DEFAULT now();

ALTER TABLE durable_job.receipts ADD COLUMN principal TEXT NOT NULL DEFAULT session_user, ADD COLUMN recorded_at TIMESTAMPTZ NOT NULL DEFAULT now();

CREATE TABLE durable_job.decisions (kind TEXT NOT NULL CHECK (kind = 'decision'), decision TEXT NOT NULL CHECK (decision IN ('accept', 'reject', 'hold')), reviewer TEXT NOT NULL, reason TEXT NOT NULL, record_json TEXT NOT NULL, created_utc TEXT NOT NULL, principal TEXT NOT NULL DEFAULT session_user, recorded_at TIMESTAMPTZ NOT NULL DEFAULT now(), job_id TEXT NOT NULL REFERENCES durable_job.jobs, PRIMARY KEY (job_id, kind));

CREATE TABLE durable_job.job_locks (job_id TEXT PRIMARY KEY REFERENCES durable_job.jobs, thread_id TEXT NOT NULL UNIQUE);

INSERT INTO durable_job.job_locks SELECT job_id, thread_id FROM durable_job.jobs;
