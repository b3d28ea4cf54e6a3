-- m002_journal: the journal (calls, call_events, drafts, outcomes), every row naming its job, and the receipts.
-- Released: this text never changes (tests/test_house.py hashes it); a change is a new migration.

CREATE TABLE durable_job.calls (operation_key TEXT NOT NULL, base_key TEXT NOT NULL, attempt INTEGER NOT NULL, item_id TEXT NOT NULL, input_sha256 TEXT NOT NULL, status TEXT NOT NULL, output_text TEXT, response_id TEXT, request_id TEXT, usage_json TEXT, created_utc TEXT NOT NULL, updated_utc TEXT NOT NULL, reconciliation_json TEXT, job_id TEXT NOT NULL REFERENCES durable_job.jobs, seq BIGSERIAL, PRIMARY KEY (job_id, operation_key));

CREATE INDEX calls_base ON durable_job.calls (job_id, base_key, attempt);

CREATE TABLE durable_job.call_events (id BIGSERIAL PRIMARY KEY, operation_key TEXT NOT NULL, event TEXT NOT NULL, detail_json TEXT, at_utc TEXT NOT NULL, job_id TEXT NOT NULL REFERENCES durable_job.jobs);

CREATE INDEX call_events_job ON durable_job.call_events (job_id, id);

CREATE TABLE durable_job.drafts (version INTEGER NOT NULL, item_id TEXT NOT NULL, results_json TEXT NOT NULL, results_sha256 TEXT NOT NULL, reviewer TEXT NOT NULL, reason TEXT NOT NULL, change_json TEXT NOT NULL, created_utc TEXT NOT NULL, job_id TEXT NOT NULL REFERENCES durable_job.jobs, PRIMARY KEY (job_id, version));

CREATE TABLE durable_job.outcomes (kind TEXT NOT NULL, record_json TEXT NOT NULL, created_utc TEXT NOT NULL, job_id TEXT NOT NULL REFERENCES durable_job.jobs, PRIMARY KEY (job_id, kind));

CREATE TABLE durable_job.receipts (job_id TEXT PRIMARY KEY REFERENCES durable_job.jobs, receipt_json TEXT NOT NULL, written_utc TEXT NOT NULL);
