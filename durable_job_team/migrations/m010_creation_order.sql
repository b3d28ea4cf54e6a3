-- m010_creation_order: jobs pages in creation order: an index in that order.
-- Released: this text never changes (tests/test_house.py hashes it); a change is a new migration.

CREATE INDEX jobs_by_creation ON durable_job.jobs (created_utc, job_id);
