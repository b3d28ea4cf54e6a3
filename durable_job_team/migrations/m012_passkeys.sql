-- m012_passkeys: the passkeys people register on serve's page (WebAuthn public keys): readable by every role of the store, each added only by its own principal, never changed or removed but by the administrator (issue 33).
-- Released: this text never changes (tests/test_house.py hashes it); a change is a new migration.

CREATE TABLE durable_job.passkeys (credential_id TEXT PRIMARY KEY, principal TEXT NOT NULL DEFAULT session_user, public_key TEXT NOT NULL, rp_id TEXT NOT NULL, origin TEXT NOT NULL, valid_after_utc TEXT NOT NULL, valid_before_utc TEXT, created_utc TEXT NOT NULL, recorded_at TIMESTAMPTZ NOT NULL DEFAULT now());

ALTER TABLE durable_job.passkeys ENABLE ROW LEVEL SECURITY;

ALTER TABLE durable_job.passkeys FORCE ROW LEVEL SECURITY;

CREATE POLICY admin ON durable_job.passkeys USING ((SELECT durable_job.is_admin())) WITH CHECK ((SELECT durable_job.is_admin()));

CREATE POLICY reads ON durable_job.passkeys FOR SELECT USING (true);

CREATE POLICY adds ON durable_job.passkeys FOR INSERT WITH CHECK (principal = session_user::text AND durable_job.is_kind('person'));

CREATE TRIGGER stamp BEFORE INSERT ON durable_job.passkeys FOR EACH ROW EXECUTE FUNCTION durable_job.stamp();

CREATE TRIGGER history BEFORE UPDATE OR DELETE ON durable_job.passkeys FOR EACH ROW EXECUTE FUNCTION durable_job.history();

DO $$ DECLARE r record; BEGIN FOR r IN SELECT role FROM durable_job.roles LOOP EXECUTE pg_catalog.format('GRANT SELECT, INSERT ON durable_job.passkeys TO %I', r.role); END LOOP; END $$;
