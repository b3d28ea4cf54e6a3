-- m007_notify: every committed write to a job's rows notifies channel durable_job (an empty payload: LISTEN checks no privilege).
-- Released: this text never changes (tests/test_house.py hashes it); a change is a new migration.

CREATE FUNCTION durable_job.notify_change() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_notify('durable_job', ''); RETURN NULL; END $$;

CREATE TRIGGER notify_change AFTER INSERT OR UPDATE OR DELETE ON durable_job.jobs FOR EACH STATEMENT EXECUTE FUNCTION durable_job.notify_change();

CREATE TRIGGER notify_change AFTER INSERT OR UPDATE OR DELETE ON durable_job.calls FOR EACH STATEMENT EXECUTE FUNCTION durable_job.notify_change();

CREATE TRIGGER notify_change AFTER INSERT OR UPDATE OR DELETE ON durable_job.call_events FOR EACH STATEMENT EXECUTE FUNCTION durable_job.notify_change();

CREATE TRIGGER notify_change AFTER INSERT OR UPDATE OR DELETE ON durable_job.drafts FOR EACH STATEMENT EXECUTE FUNCTION durable_job.notify_change();

CREATE TRIGGER notify_change AFTER INSERT OR UPDATE OR DELETE ON durable_job.outcomes FOR EACH STATEMENT EXECUTE FUNCTION durable_job.notify_change();

CREATE TRIGGER notify_change AFTER INSERT OR UPDATE OR DELETE ON durable_job.decisions FOR EACH STATEMENT EXECUTE FUNCTION durable_job.notify_change();

CREATE TRIGGER notify_change AFTER INSERT OR UPDATE OR DELETE ON durable_job.receipts FOR EACH STATEMENT EXECUTE FUNCTION durable_job.notify_change();

CREATE TRIGGER notify_change AFTER INSERT OR UPDATE OR DELETE ON durable_job.links FOR EACH STATEMENT EXECUTE FUNCTION durable_job.notify_change();

CREATE TRIGGER notify_change AFTER INSERT OR UPDATE OR DELETE ON durable_job.checkpoints FOR EACH STATEMENT EXECUTE FUNCTION durable_job.notify_change();
