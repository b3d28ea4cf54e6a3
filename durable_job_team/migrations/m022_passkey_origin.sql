-- m022_passkey_origin: a passkey row checked whole as it is written, and its authenticator's sign counter kept with it (issue 43). (1) CHECK constraints, NOT VALID so that a store whose older rows break them still migrates (`passkeys` prints such a row as a comment naming why, never as a line verify refuses): principal one word; rp_id a host name (lower case, labels of letters, digits and hyphens, no address); origin http(s)://HOST[:PORT], HOST the rp_id or a name under it (the origin serve was reached on at registration, which every assertion of the key must come from); credential_id and public_key base64url; the validity bounds UTC times. (2) sign_count, the counter of the last assertion serve counted (0: the authenticator keeps none): a role raises only its own passkey's, only upward (the UPDATE policy, a column grant and the trigger that replaces history on this table); nothing else of a row ever changes but by the administrator.
-- Released: this text never changes (tests/test_house.py hashes it); a change is a new migration.

ALTER TABLE durable_job.passkeys ADD COLUMN sign_count BIGINT NOT NULL DEFAULT 0 CONSTRAINT sign_count_counter CHECK (sign_count >= 0 AND sign_count < 4294967296);

ALTER TABLE durable_job.passkeys ADD CONSTRAINT principal_one_word CHECK (principal ~ '^[^[:space:]#]+$') NOT VALID;

ALTER TABLE durable_job.passkeys ADD CONSTRAINT rp_id_host_name CHECK (length(rp_id) <= 253 AND rp_id ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$' AND rp_id !~ '^[0-9.]+$') NOT VALID;

ALTER TABLE durable_job.passkeys ADD CONSTRAINT origin_of_rp_id CHECK (origin ~ '^https?://[a-z0-9.-]+(:[0-9]{1,5})?$' AND (substring(origin FROM '^https?://([a-z0-9.-]+)') = rp_id OR substring(origin FROM '^https?://([a-z0-9.-]+)') LIKE '%.' || rp_id)) NOT VALID;

ALTER TABLE durable_job.passkeys ADD CONSTRAINT ids_base64url CHECK (credential_id ~ '^[A-Za-z0-9_-]+$' AND length(credential_id) BETWEEN 16 AND 2048 AND public_key ~ '^[A-Za-z0-9_-]+$' AND length(public_key) BETWEEN 16 AND 2048) NOT VALID;

ALTER TABLE durable_job.passkeys ADD CONSTRAINT bounds_utc CHECK (valid_after_utc ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?(Z|[+-][0-9]{2}:[0-9]{2})$' AND (valid_before_utc IS NULL OR valid_before_utc ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?(Z|[+-][0-9]{2}:[0-9]{2})$')) NOT VALID;

CREATE FUNCTION durable_job.passkey_change() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$ BEGIN IF durable_job.is_admin() THEN RETURN COALESCE(NEW, OLD); END IF; IF TG_OP = 'UPDATE' AND OLD.principal = session_user::text AND NEW.sign_count > OLD.sign_count AND (NEW.credential_id, NEW.principal, NEW.public_key, NEW.rp_id, NEW.origin, NEW.valid_after_utc, NEW.valid_before_utc, NEW.created_utc, NEW.recorded_at) IS NOT DISTINCT FROM (OLD.credential_id, OLD.principal, OLD.public_key, OLD.rp_id, OLD.origin, OLD.valid_after_utc, OLD.valid_before_utc, OLD.created_utc, OLD.recorded_at) THEN RETURN NEW; END IF; RAISE EXCEPTION 'durable_job.passkeys is history: a row changes only by its own principal''s sign counter growing (% refused)', TG_OP USING ERRCODE = 'insufficient_privilege'; END $$;

REVOKE ALL ON FUNCTION durable_job.passkey_change() FROM PUBLIC;

DROP TRIGGER history ON durable_job.passkeys;

CREATE TRIGGER history BEFORE UPDATE OR DELETE ON durable_job.passkeys FOR EACH ROW EXECUTE FUNCTION durable_job.passkey_change();

CREATE POLICY counts ON durable_job.passkeys FOR UPDATE USING (principal = session_user::text) WITH CHECK (principal = session_user::text);

DO $$ DECLARE r record; BEGIN FOR r IN SELECT role FROM durable_job.roles LOOP EXECUTE pg_catalog.format('GRANT UPDATE (sign_count) ON durable_job.passkeys TO %I', r.role); END LOOP; END $$;
