-- Secrets at rest are sealed (issue 43, crate::seal): `secrets.value`,
-- `deployment_secrets.value` and `hooks.secret` hold
-- `gh-sealed-1.KEYID.…`, sealed by `gatehouse db migrate` (given the
-- operator's key) right after this version. This version marks the
-- change, so an older Gatehouse, which would read a sealed value as the
-- secret itself, refuses the database.
--
-- A hook's signing key may now be sealed again under another key (`key
-- rotate`), and nothing else: its binding stays fixed, and a new value
-- that is not in the sealed form is refused as before.
DROP TRIGGER hooks_binding_fixed ON hooks;
CREATE TRIGGER hooks_binding_fixed
BEFORE UPDATE OF chat, gatekeeper, trigger, gadget, kind, token_digest ON hooks FOR EACH ROW
EXECUTE FUNCTION gatehouse_refuse_change('a hook''s binding never changes; add a new hook');
CREATE TRIGGER hooks_secret_resealed_only
BEFORE UPDATE OF secret ON hooks FOR EACH ROW
WHEN (NEW.secret IS NULL OR substr(NEW.secret, 1, 12) <> 'gh-sealed-1.')
EXECUTE FUNCTION gatehouse_refuse_change('a hook''s binding never changes; add a new hook');
