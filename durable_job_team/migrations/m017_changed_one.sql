-- m017_changed_one: a call's answer in one round trip (issue 32). A pipelined writer sends the UPDATE that writes a call's answer (WHERE its row is still pending) without waiting for its count: the statement asks changed_one how many rows it changed, which raises SQLSTATE DJ002 unless it was exactly one, so a row reconciled meanwhile aborts the answer's transaction (its links, its event, its result) at its COMMIT instead of a round trip before it. Callable by the store's roles alone, as lock_stands() is.
-- Released: this text never changes (tests/test_house.py hashes it); a change is a new migration.

CREATE FUNCTION durable_job.changed_one(n bigint) RETURNS boolean LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ BEGIN IF n IS DISTINCT FROM 1 THEN RAISE EXCEPTION 'the row to change is not as this act found it (% rows changed, not 1)', n USING ERRCODE = 'DJ002'; END IF; RETURN true; END $$;

REVOKE ALL ON FUNCTION durable_job.changed_one(bigint) FROM PUBLIC;

DO $$ DECLARE r record; BEGIN FOR r IN SELECT role FROM durable_job.roles LOOP EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION durable_job.changed_one(bigint) TO %I', r.role); END LOOP; END $$;
