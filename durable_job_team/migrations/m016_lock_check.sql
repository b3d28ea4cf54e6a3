-- m016_lock_check: the job's lock, checked by a statement that fails when it no longer stands. A writer sends it first in each transaction of its own, and before each of LangGraph's checkpoint writes in the same implicit transaction as them, so that a lost lock aborts what follows it without a round trip of its own (issue 32). The lock is the job_locks row held by an open transaction on the lock's connection: its backend pid and transaction id, both the server's own, which a writer read when it took the row. Callable by the store's roles alone, as tombstoned() is.
-- Released: this text never changes (tests/test_house.py hashes it); a change is a new migration.

CREATE FUNCTION durable_job.lock_stands(holder integer, xact text) RETURNS boolean LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_locks l WHERE l.pid = holder AND l.locktype = 'transactionid' AND l.transactionid::text = xact AND l.mode = 'ExclusiveLock' AND l.granted) THEN RAISE EXCEPTION 'the connection that held the job''s lock is gone' USING ERRCODE = 'DJ001'; END IF; RETURN true; END $$;

REVOKE ALL ON FUNCTION durable_job.lock_stands(integer, text) FROM PUBLIC;

DO $$ DECLARE r record; BEGIN FOR r IN SELECT role FROM durable_job.roles LOOP EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION durable_job.lock_stands(integer, text) TO %I', r.role); END LOOP; END $$;
