-- m016_floor: the durable work of a store job, down to what its guarantees need (issue 32). (1) The job's lock, checked by a statement that fails when it no longer stands: a writer sends it first in each transaction of its own, and before each of LangGraph's checkpoint writes in the same implicit transaction as them, so that a lost lock aborts what follows it without a round trip of its own. The lock is the job_locks row held FOR UPDATE by a transaction left open on the lock's connection, which holds it while it is in progress: its full transaction id (xid8, the server's own, which a writer read when it took the row) is checked with pg_xact_status, a look-up in the server's memory. Callable by the store's roles alone, as tombstoned() is. (2) The functions the policies and triggers ask who acts (is_admin, is_kind, runs, tends, decides), the same statements as m011_hostile_roles wrote them, with the same fixed search_path, in PL/pgSQL, which keeps each statement's plan for the session: a SQL function with a SET clause is planned again at every call (about 50 microseconds against 7, measured), and a job's statements call them about a hundred times.
-- Released: this text never changes (tests/test_house.py hashes it); a change is a new migration.

CREATE FUNCTION durable_job.lock_stands(xact text) RETURNS boolean LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$ BEGIN IF pg_catalog.pg_xact_status(xact::pg_catalog.xid8) IS DISTINCT FROM 'in progress' THEN RAISE EXCEPTION 'the connection that held the job''s lock is gone' USING ERRCODE = 'DJ001'; END IF; RETURN true; END $$;

REVOKE ALL ON FUNCTION durable_job.lock_stands(text) FROM PUBLIC;

DO $$ DECLARE r record; BEGIN FOR r IN SELECT role FROM durable_job.roles LOOP EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION durable_job.lock_stands(text) TO %I', r.role); END LOOP; END $$;

CREATE OR REPLACE FUNCTION durable_job.is_admin() RETURNS boolean LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$ BEGIN RETURN (SELECT session_user = pg_catalog.pg_get_userbyid(n.nspowner) OR (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = session_user) FROM pg_catalog.pg_namespace n WHERE n.nspname = 'durable_job'); END $$;

CREATE OR REPLACE FUNCTION durable_job.is_kind(k text) RETURNS boolean LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$ BEGIN RETURN EXISTS (SELECT 1 FROM durable_job.roles r WHERE r.role = session_user::text AND r.kind = k); END $$;

CREATE OR REPLACE FUNCTION durable_job.runs(job text) RETURNS boolean LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$ BEGIN RETURN EXISTS (SELECT 1 FROM durable_job.jobs j WHERE j.job_id = job AND (j.owner = session_user::text OR durable_job.is_kind('worker'))); END $$;

CREATE OR REPLACE FUNCTION durable_job.tends(job text) RETURNS boolean LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$ BEGIN RETURN EXISTS (SELECT 1 FROM durable_job.jobs j WHERE j.job_id = job AND durable_job.is_kind('person') AND (j.owner = session_user::text OR session_user::text = ANY (j.reviewers))); END $$;

CREATE OR REPLACE FUNCTION durable_job.decides(job text) RETURNS boolean LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$ BEGIN RETURN EXISTS (SELECT 1 FROM durable_job.jobs j WHERE j.job_id = job AND durable_job.is_kind('person') AND CASE WHEN pg_catalog.cardinality(j.reviewers) > 0 THEN session_user::text = ANY (j.reviewers) AND j.owner <> session_user::text ELSE j.owner = session_user::text END); END $$;
