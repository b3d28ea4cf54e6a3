-- m004_policies: who may do what: row-level security on every table, the policy helpers, the stamping and history triggers (applied once LangGraph's tables exist).
-- Released: this text never changes (tests/test_house.py hashes it); a change is a new migration.

CREATE FUNCTION durable_job.is_admin() RETURNS boolean LANGUAGE sql STABLE AS $$ SELECT session_user = pg_get_userbyid(nspowner) OR (SELECT rolsuper FROM pg_roles WHERE rolname = session_user) FROM pg_namespace WHERE nspname = 'durable_job' $$;

CREATE FUNCTION durable_job.is_kind(k text) RETURNS boolean LANGUAGE sql STABLE AS $$ SELECT EXISTS (SELECT 1 FROM durable_job.roles WHERE role = session_user::text AND kind = k) $$;

CREATE FUNCTION durable_job.runs(job text) RETURNS boolean LANGUAGE sql STABLE AS $$ SELECT EXISTS (SELECT 1 FROM durable_job.jobs WHERE job_id = job AND (owner = session_user::text OR durable_job.is_kind('worker'))) $$;

CREATE FUNCTION durable_job.tends(job text) RETURNS boolean LANGUAGE sql STABLE AS $$ SELECT EXISTS (SELECT 1 FROM durable_job.jobs WHERE job_id = job AND durable_job.is_kind('person') AND (owner = session_user::text OR session_user::text = ANY (reviewers))) $$;

CREATE FUNCTION durable_job.decides(job text) RETURNS boolean LANGUAGE sql STABLE AS $$ SELECT EXISTS (SELECT 1 FROM durable_job.jobs WHERE job_id = job AND durable_job.is_kind('person') AND CASE WHEN cardinality(reviewers) > 0 THEN session_user::text = ANY (reviewers) AND owner <> session_user::text ELSE owner = session_user::text END) $$;

CREATE FUNCTION durable_job.job_of(thread text) RETURNS text LANGUAGE sql STABLE AS $$ SELECT job_id FROM durable_job.jobs WHERE thread_id = thread $$;

CREATE FUNCTION durable_job.stamp() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF NOT durable_job.is_admin() THEN NEW.principal := session_user; NEW.recorded_at := now(); END IF; RETURN NEW; END $$;

CREATE FUNCTION durable_job.stamp_job() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF NOT durable_job.is_admin() THEN NEW.owner := session_user; NEW.sealed_at := now(); END IF; RETURN NEW; END $$;

CREATE FUNCTION durable_job.history() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF durable_job.is_admin() THEN RETURN COALESCE(NEW, OLD); END IF; RAISE EXCEPTION 'durable_job.% is history: its rows are written once and never changed or removed (% refused)', TG_TABLE_NAME, TG_OP USING ERRCODE = 'insufficient_privilege'; END $$;

CREATE FUNCTION durable_job.call_change() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF durable_job.is_admin() THEN RETURN COALESCE(NEW, OLD); END IF; IF OLD.status <> 'pending' THEN RAISE EXCEPTION 'durable_job.calls: call % is %, and only a pending call changes', OLD.operation_key, OLD.status USING ERRCODE = 'insufficient_privilege'; END IF; IF TG_OP = 'DELETE' THEN IF NOT EXISTS (SELECT 1 FROM durable_job.call_events n WHERE n.job_id = OLD.job_id AND n.operation_key = OLD.operation_key AND n.event = 'not-sent' AND n.id > (SELECT max(d.id) FROM durable_job.call_events d WHERE d.job_id = OLD.job_id AND d.operation_key = OLD.operation_key AND d.event = 'dispatch')) THEN RAISE EXCEPTION 'durable_job.calls: call % may be removed only beside its not-sent event', OLD.operation_key USING ERRCODE = 'insufficient_privilege'; END IF; RETURN OLD; END IF; IF (NEW.job_id, NEW.operation_key, NEW.base_key, NEW.attempt, NEW.item_id, NEW.input_sha256, NEW.created_utc, NEW.principal, NEW.recorded_at) IS DISTINCT FROM (OLD.job_id, OLD.operation_key, OLD.base_key, OLD.attempt, OLD.item_id, OLD.input_sha256, OLD.created_utc, OLD.principal, OLD.recorded_at) OR NEW.status NOT IN ('pending', 'completed', 'abandoned', 'rejected') THEN RAISE EXCEPTION 'durable_job.calls: call % may change only its outcome', OLD.operation_key USING ERRCODE = 'insufficient_privilege'; END IF; IF NEW.reconciliation_json IS DISTINCT FROM OLD.reconciliation_json AND NEW.status IN ('completed', 'abandoned') AND NOT durable_job.tends(NEW.job_id) THEN RAISE EXCEPTION 'durable_job.calls: only the job''s owner or a reviewer reconciles call %', OLD.operation_key USING ERRCODE = 'insufficient_privilege'; END IF; RETURN NEW; END $$;

CREATE FUNCTION durable_job.write_change() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF durable_job.is_admin() OR (OLD.channel IN ('__error__', '__scheduled__', '__interrupt__', '__resume__') AND NEW.channel = OLD.channel AND (NEW.thread_id, NEW.checkpoint_ns, NEW.checkpoint_id, NEW.task_id, NEW.idx, NEW.task_path) IS NOT DISTINCT FROM (OLD.thread_id, OLD.checkpoint_ns, OLD.checkpoint_id, OLD.task_id, OLD.idx, OLD.task_path)) THEN RETURN NEW; END IF; RAISE EXCEPTION 'durable_job.checkpoint_writes is history: only a task''s own error, interrupt or resume write is replaced' USING ERRCODE = 'insufficient_privilege'; END $$;

CREATE FUNCTION durable_job.event_check() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF NEW.event IN ('reconciled', 'retry') AND NOT durable_job.is_admin() AND NOT durable_job.tends(NEW.job_id) THEN RAISE EXCEPTION 'durable_job.call_events: only the job''s owner or a reviewer may %', NEW.event USING ERRCODE = 'insufficient_privilege'; END IF; RETURN NEW; END $$;

ALTER TABLE durable_job.jobs ENABLE ROW LEVEL SECURITY;

ALTER TABLE durable_job.jobs FORCE ROW LEVEL SECURITY;

CREATE POLICY admin ON durable_job.jobs USING ((SELECT durable_job.is_admin())) WITH CHECK ((SELECT durable_job.is_admin()));

ALTER TABLE durable_job.job_locks ENABLE ROW LEVEL SECURITY;

ALTER TABLE durable_job.job_locks FORCE ROW LEVEL SECURITY;

CREATE POLICY admin ON durable_job.job_locks USING ((SELECT durable_job.is_admin())) WITH CHECK ((SELECT durable_job.is_admin()));

ALTER TABLE durable_job.roles ENABLE ROW LEVEL SECURITY;

ALTER TABLE durable_job.roles FORCE ROW LEVEL SECURITY;

CREATE POLICY admin ON durable_job.roles USING ((SELECT durable_job.is_admin())) WITH CHECK ((SELECT durable_job.is_admin()));

ALTER TABLE durable_job.calls ENABLE ROW LEVEL SECURITY;

ALTER TABLE durable_job.calls FORCE ROW LEVEL SECURITY;

CREATE POLICY admin ON durable_job.calls USING ((SELECT durable_job.is_admin())) WITH CHECK ((SELECT durable_job.is_admin()));

ALTER TABLE durable_job.call_events ENABLE ROW LEVEL SECURITY;

ALTER TABLE durable_job.call_events FORCE ROW LEVEL SECURITY;

CREATE POLICY admin ON durable_job.call_events USING ((SELECT durable_job.is_admin())) WITH CHECK ((SELECT durable_job.is_admin()));

ALTER TABLE durable_job.drafts ENABLE ROW LEVEL SECURITY;

ALTER TABLE durable_job.drafts FORCE ROW LEVEL SECURITY;

CREATE POLICY admin ON durable_job.drafts USING ((SELECT durable_job.is_admin())) WITH CHECK ((SELECT durable_job.is_admin()));

ALTER TABLE durable_job.outcomes ENABLE ROW LEVEL SECURITY;

ALTER TABLE durable_job.outcomes FORCE ROW LEVEL SECURITY;

CREATE POLICY admin ON durable_job.outcomes USING ((SELECT durable_job.is_admin())) WITH CHECK ((SELECT durable_job.is_admin()));

ALTER TABLE durable_job.decisions ENABLE ROW LEVEL SECURITY;

ALTER TABLE durable_job.decisions FORCE ROW LEVEL SECURITY;

CREATE POLICY admin ON durable_job.decisions USING ((SELECT durable_job.is_admin())) WITH CHECK ((SELECT durable_job.is_admin()));

ALTER TABLE durable_job.receipts ENABLE ROW LEVEL SECURITY;

ALTER TABLE durable_job.receipts FORCE ROW LEVEL SECURITY;

CREATE POLICY admin ON durable_job.receipts USING ((SELECT durable_job.is_admin())) WITH CHECK ((SELECT durable_job.is_admin()));

ALTER TABLE durable_job._migrations ENABLE ROW LEVEL SECURITY;

ALTER TABLE durable_job._migrations FORCE ROW LEVEL SECURITY;

CREATE POLICY admin ON durable_job._migrations USING ((SELECT durable_job.is_admin())) WITH CHECK ((SELECT durable_job.is_admin()));

ALTER TABLE durable_job.checkpoints ENABLE ROW LEVEL SECURITY;

ALTER TABLE durable_job.checkpoints FORCE ROW LEVEL SECURITY;

CREATE POLICY admin ON durable_job.checkpoints USING ((SELECT durable_job.is_admin())) WITH CHECK ((SELECT durable_job.is_admin()));

ALTER TABLE durable_job.checkpoint_blobs ENABLE ROW LEVEL SECURITY;

ALTER TABLE durable_job.checkpoint_blobs FORCE ROW LEVEL SECURITY;

CREATE POLICY admin ON durable_job.checkpoint_blobs USING ((SELECT durable_job.is_admin())) WITH CHECK ((SELECT durable_job.is_admin()));

ALTER TABLE durable_job.checkpoint_writes ENABLE ROW LEVEL SECURITY;

ALTER TABLE durable_job.checkpoint_writes FORCE ROW LEVEL SECURITY;

CREATE POLICY admin ON durable_job.checkpoint_writes USING ((SELECT durable_job.is_admin())) WITH CHECK ((SELECT durable_job.is_admin()));

ALTER TABLE durable_job.checkpoint_migrations ENABLE ROW LEVEL SECURITY;

ALTER TABLE durable_job.checkpoint_migrations FORCE ROW LEVEL SECURITY;

CREATE POLICY admin ON durable_job.checkpoint_migrations USING ((SELECT durable_job.is_admin())) WITH CHECK ((SELECT durable_job.is_admin()));

CREATE POLICY reads ON durable_job.calls FOR SELECT USING (EXISTS (SELECT 1 FROM durable_job.jobs j WHERE j.job_id = calls.job_id));

CREATE POLICY reads ON durable_job.call_events FOR SELECT USING (EXISTS (SELECT 1 FROM durable_job.jobs j WHERE j.job_id = call_events.job_id));

CREATE POLICY reads ON durable_job.drafts FOR SELECT USING (EXISTS (SELECT 1 FROM durable_job.jobs j WHERE j.job_id = drafts.job_id));

CREATE POLICY reads ON durable_job.outcomes FOR SELECT USING (EXISTS (SELECT 1 FROM durable_job.jobs j WHERE j.job_id = outcomes.job_id));

CREATE POLICY reads ON durable_job.decisions FOR SELECT USING (EXISTS (SELECT 1 FROM durable_job.jobs j WHERE j.job_id = decisions.job_id));

CREATE POLICY reads ON durable_job.receipts FOR SELECT USING (EXISTS (SELECT 1 FROM durable_job.jobs j WHERE j.job_id = receipts.job_id));

CREATE POLICY reads ON durable_job.job_locks FOR SELECT USING (EXISTS (SELECT 1 FROM durable_job.jobs j WHERE j.job_id = job_locks.job_id));

CREATE POLICY reads ON durable_job.checkpoints FOR SELECT USING (EXISTS (SELECT 1 FROM durable_job.jobs j WHERE j.thread_id = checkpoints.thread_id));

CREATE POLICY reads ON durable_job.checkpoint_blobs FOR SELECT USING (EXISTS (SELECT 1 FROM durable_job.jobs j WHERE j.thread_id = checkpoint_blobs.thread_id));

CREATE POLICY reads ON durable_job.checkpoint_writes FOR SELECT USING (EXISTS (SELECT 1 FROM durable_job.jobs j WHERE j.thread_id = checkpoint_writes.thread_id));

CREATE POLICY reads ON durable_job.jobs FOR SELECT USING (owner = session_user::text OR session_user::text = ANY (reviewers) OR (SELECT durable_job.is_kind('worker')));

CREATE POLICY reads ON durable_job.roles FOR SELECT USING (true);

CREATE POLICY reads ON durable_job._migrations FOR SELECT USING (true);

CREATE POLICY reads ON durable_job.checkpoint_migrations FOR SELECT USING (true);

CREATE POLICY adds ON durable_job.jobs FOR INSERT WITH CHECK (durable_job.is_kind('person'));

CREATE POLICY adds ON durable_job.job_locks FOR INSERT WITH CHECK (durable_job.runs(job_id));

CREATE POLICY adds ON durable_job.calls FOR INSERT WITH CHECK (durable_job.runs(job_id) OR durable_job.tends(job_id));

CREATE POLICY adds ON durable_job.call_events FOR INSERT WITH CHECK (durable_job.runs(job_id) OR durable_job.tends(job_id));

CREATE POLICY adds ON durable_job.drafts FOR INSERT WITH CHECK (durable_job.tends(job_id));

CREATE POLICY adds ON durable_job.outcomes FOR INSERT WITH CHECK (durable_job.tends(job_id));

CREATE POLICY adds ON durable_job.decisions FOR INSERT WITH CHECK (durable_job.decides(job_id));

CREATE POLICY adds ON durable_job.receipts FOR INSERT WITH CHECK (durable_job.runs(job_id) OR durable_job.tends(job_id) OR durable_job.decides(job_id));

CREATE POLICY adds ON durable_job.checkpoints FOR INSERT WITH CHECK (durable_job.runs(durable_job.job_of(thread_id)) OR durable_job.decides(durable_job.job_of(thread_id)));

CREATE POLICY adds ON durable_job.checkpoint_blobs FOR INSERT WITH CHECK (durable_job.runs(durable_job.job_of(thread_id)) OR durable_job.decides(durable_job.job_of(thread_id)));

CREATE POLICY adds ON durable_job.checkpoint_writes FOR INSERT WITH CHECK (durable_job.runs(durable_job.job_of(thread_id)) OR durable_job.decides(durable_job.job_of(thread_id)));

CREATE POLICY changes ON durable_job.calls FOR UPDATE USING (durable_job.runs(job_id) OR durable_job.tends(job_id)) WITH CHECK (durable_job.runs(job_id) OR durable_job.tends(job_id));

CREATE POLICY changes ON durable_job.checkpoints FOR UPDATE USING (durable_job.runs(durable_job.job_of(thread_id)) OR durable_job.decides(durable_job.job_of(thread_id))) WITH CHECK (durable_job.runs(durable_job.job_of(thread_id)) OR durable_job.decides(durable_job.job_of(thread_id)));

CREATE POLICY changes ON durable_job.checkpoint_writes FOR UPDATE USING (durable_job.runs(durable_job.job_of(thread_id)) OR durable_job.decides(durable_job.job_of(thread_id))) WITH CHECK (durable_job.runs(durable_job.job_of(thread_id)) OR durable_job.decides(durable_job.job_of(thread_id)));

CREATE POLICY changes ON durable_job.job_locks FOR UPDATE USING (durable_job.runs(job_id) OR durable_job.tends(job_id) OR durable_job.decides(job_id)) WITH CHECK (durable_job.runs(job_id) OR durable_job.tends(job_id) OR durable_job.decides(job_id));

CREATE POLICY removes ON durable_job.calls FOR DELETE USING (durable_job.runs(job_id) OR durable_job.tends(job_id));

CREATE TRIGGER stamp_job BEFORE INSERT ON durable_job.jobs FOR EACH ROW EXECUTE FUNCTION durable_job.stamp_job();

CREATE TRIGGER stamp BEFORE INSERT ON durable_job.calls FOR EACH ROW EXECUTE FUNCTION durable_job.stamp();

CREATE TRIGGER stamp BEFORE INSERT ON durable_job.call_events FOR EACH ROW EXECUTE FUNCTION durable_job.stamp();

CREATE TRIGGER stamp BEFORE INSERT ON durable_job.drafts FOR EACH ROW EXECUTE FUNCTION durable_job.stamp();

CREATE TRIGGER stamp BEFORE INSERT ON durable_job.outcomes FOR EACH ROW EXECUTE FUNCTION durable_job.stamp();

CREATE TRIGGER stamp BEFORE INSERT ON durable_job.decisions FOR EACH ROW EXECUTE FUNCTION durable_job.stamp();

CREATE TRIGGER stamp BEFORE INSERT ON durable_job.receipts FOR EACH ROW EXECUTE FUNCTION durable_job.stamp();

CREATE TRIGGER history BEFORE UPDATE OR DELETE ON durable_job.jobs FOR EACH ROW EXECUTE FUNCTION durable_job.history();

CREATE TRIGGER history BEFORE UPDATE OR DELETE ON durable_job.job_locks FOR EACH ROW EXECUTE FUNCTION durable_job.history();

CREATE TRIGGER history BEFORE UPDATE OR DELETE ON durable_job.call_events FOR EACH ROW EXECUTE FUNCTION durable_job.history();

CREATE TRIGGER history BEFORE UPDATE OR DELETE ON durable_job.drafts FOR EACH ROW EXECUTE FUNCTION durable_job.history();

CREATE TRIGGER history BEFORE UPDATE OR DELETE ON durable_job.outcomes FOR EACH ROW EXECUTE FUNCTION durable_job.history();

CREATE TRIGGER history BEFORE UPDATE OR DELETE ON durable_job.decisions FOR EACH ROW EXECUTE FUNCTION durable_job.history();

CREATE TRIGGER history BEFORE UPDATE OR DELETE ON durable_job.receipts FOR EACH ROW EXECUTE FUNCTION durable_job.history();

CREATE TRIGGER history BEFORE UPDATE OR DELETE ON durable_job.roles FOR EACH ROW EXECUTE FUNCTION durable_job.history();

CREATE TRIGGER history BEFORE UPDATE OR DELETE ON durable_job.checkpoints FOR EACH ROW EXECUTE FUNCTION durable_job.history();

CREATE TRIGGER history BEFORE UPDATE OR DELETE ON durable_job.checkpoint_blobs FOR EACH ROW EXECUTE FUNCTION durable_job.history();

CREATE TRIGGER history BEFORE DELETE ON durable_job.checkpoint_writes FOR EACH ROW EXECUTE FUNCTION durable_job.history();

CREATE TRIGGER write_change BEFORE UPDATE ON durable_job.checkpoint_writes FOR EACH ROW EXECUTE FUNCTION durable_job.write_change();

CREATE TRIGGER call_change BEFORE UPDATE OR DELETE ON durable_job.calls FOR EACH ROW EXECUTE FUNCTION durable_job.call_change();

CREATE TRIGGER event_check BEFORE INSERT ON durable_job.call_events FOR EACH ROW EXECUTE FUNCTION durable_job.event_check();
