-- Secrets at rest are sealed (issue 43, crate::seal): `secrets.value`,
-- `deployment_secrets.value` and `hooks.secret` hold
-- `gh-sealed-1.KEYID.…`, sealed by the host with the operator's key as it
-- opens the database (the schema cannot: it has no key). This version
-- marks the change, so an older Gatehouse, which would read a sealed value
-- as the secret itself, refuses the database.
--
-- A hook's signing key may now be sealed again under another key (`key
-- rotate`), and nothing else: its binding stays fixed, and a new value
-- that is not in the sealed form is refused as before.
DROP TRIGGER IF EXISTS hooks_binding_fixed;
CREATE TRIGGER IF NOT EXISTS hooks_binding_fixed
BEFORE UPDATE OF chat, gatekeeper, trigger, gadget, kind, token_digest ON hooks
BEGIN SELECT RAISE(ABORT, 'a hook''s binding never changes; add a new hook'); END;
CREATE TRIGGER IF NOT EXISTS hooks_secret_resealed_only
BEFORE UPDATE OF secret ON hooks
WHEN NEW.secret IS NULL OR substr(NEW.secret, 1, 12) <> 'gh-sealed-1.'
BEGIN SELECT RAISE(ABORT, 'a hook''s binding never changes; add a new hook'); END;
