-- Schema 4 (issue 16, part 1): revert, expiry, exactly once where the
-- service allows it.
--
-- The ledger needs no rebuild: its state CHECK has admitted 'expired'
-- since schema 2, so new columns are added in place.

-- A revert is a new action that names the applied action it undoes
-- (SPEC H2). NULL: an ordinary action.
ALTER TABLE ledger ADD COLUMN reverts INTEGER;
CREATE INDEX IF NOT EXISTS ledger_by_reverts ON ledger (reverts) WHERE reverts IS NOT NULL;

-- How long an action of the chat may wait for a decision before it
-- expires (SPEC H3), in milliseconds. NULL: the default, 7 days.
ALTER TABLE chats ADD COLUMN expire_after_ms INTEGER
    CHECK (expire_after_ms IS NULL OR expire_after_ms > 0);

-- Deployment-local secrets the kernel derives things from (never a
-- gatekeeper's credential; those live in `secrets`). `idempotency`: the
-- key of the HMAC that names every send of an action to its service.
-- Created on first use, kept with the ledger whose ids it is used with.
CREATE TABLE IF NOT EXISTS deployment_secrets (
    name       TEXT PRIMARY KEY,
    value      TEXT NOT NULL CHECK (length(value) >= 64),
    created_at INTEGER NOT NULL
) STRICT;
