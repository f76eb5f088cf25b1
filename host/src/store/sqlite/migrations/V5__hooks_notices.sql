-- Schema 5 (issue 16: hooks, notifications). New tables and added columns
-- only: the ledger is not rebuilt (its kind CHECK already allows 'hook').

-- A hook (SPEC H1): a gatekeeper's trigger bound to a gadget in a chat. Its
-- ledger entry (kind 'hook', same id sequence as actions and observations)
-- is `id`; this row holds what the ledger's columns cannot. A hook is
-- disabled until a person who may decide in its chat enables it; its turns
-- run under "hook N in CHAT" for that person.
CREATE TABLE IF NOT EXISTS hooks (
    id          INTEGER PRIMARY KEY REFERENCES ledger(id),
    chat        TEXT NOT NULL,
    gatekeeper  TEXT NOT NULL,
    trigger     TEXT NOT NULL,
    gadget      TEXT NOT NULL,
    kind        TEXT NOT NULL CHECK (kind IN ('webhook', 'schedule')),
    -- A schedule's period; NULL for a webhook.
    every_secs  INTEGER CHECK (every_secs IS NULL OR every_secs BETWEEN 1 AND 31536000),
    -- A webhook's URL token, as its SHA-256 digest only (the token itself is
    -- printed once, at `hook add`).
    token_digest TEXT UNIQUE CHECK (token_digest IS NULL OR length(token_digest) = 64),
    -- The key deliveries are signed with (HMAC-SHA256 of the body); the
    -- kernel must hold it to verify, like any other secret it keeps.
    secret      TEXT,
    enabled     INTEGER NOT NULL DEFAULT 0 CHECK (enabled IN (0, 1)),
    -- Who enabled it last (whose accounts its turns use), and when.
    enabled_by  TEXT,
    enabled_at  INTEGER,
    created_by  TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    -- A schedule's next firing; claimed by a conditional UPDATE, so two
    -- `serve` processes never both fire it.
    next_due_at INTEGER,
    CHECK ((kind = 'schedule') = (every_secs IS NOT NULL)),
    CHECK ((kind = 'webhook') = (token_digest IS NOT NULL AND secret IS NOT NULL)),
    CHECK (enabled = 0 OR enabled_by IS NOT NULL)
) STRICT;
CREATE INDEX IF NOT EXISTS hooks_by_chat ON hooks (chat, id);
CREATE TRIGGER IF NOT EXISTS hooks_binding_fixed
BEFORE UPDATE OF chat, gatekeeper, trigger, gadget, kind, token_digest, secret ON hooks
BEGIN SELECT RAISE(ABORT, 'a hook''s binding never changes; add a new hook'); END;

-- Every firing of a hook (a delivery or a schedule) and how it ended: the
-- turns a hook started (SPEC L1). A delivery's body is kept only as its
-- digest, which also refuses a replayed delivery.
CREATE TABLE IF NOT EXISTS hook_firings (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    hook        INTEGER NOT NULL REFERENCES hooks(id),
    cause       TEXT NOT NULL CHECK (cause IN ('webhook', 'schedule')),
    -- running, done (the turn ended), failed (the turn failed), refused
    -- (nothing ran: why is in `note`).
    outcome     TEXT NOT NULL CHECK (outcome IN ('running', 'done', 'failed', 'refused')),
    note        TEXT CHECK (note IS NULL OR length(note) <= 4096),
    body_digest TEXT CHECK (body_digest IS NULL OR length(body_digest) = 64),
    person      TEXT NOT NULL,
    -- The process running the turn (as claims name it), while it runs.
    owner       TEXT,
    fired_at    INTEGER NOT NULL,
    finished_at INTEGER
) STRICT;
CREATE INDEX IF NOT EXISTS hook_firings_by_hook ON hook_firings (hook, id);
CREATE UNIQUE INDEX IF NOT EXISTS hook_firings_once ON hook_firings (hook, body_digest)
    WHERE body_digest IS NOT NULL;

-- What a hook's turn wrote to the ledger names the hook and its firing.
ALTER TABLE ledger ADD COLUMN hook INTEGER;
CREATE INDEX IF NOT EXISTS ledger_by_hook ON ledger (hook, id) WHERE hook IS NOT NULL;

-- Notifications: where a person is told that actions wait for them. The
-- URL is the only place a notice goes.
CREATE TABLE IF NOT EXISTS notify_targets (
    user         TEXT PRIMARY KEY REFERENCES users(name),
    url          TEXT NOT NULL CHECK (length(url) BETWEEN 1 AND 2048),
    set_at       INTEGER NOT NULL,
    last_sent_at INTEGER
) STRICT;

-- Which waiting action each person was told of. A row lives while its
-- action waits: an action that waits again later (sent back to pending by
-- a revalidation) is told of again.
CREATE TABLE IF NOT EXISTS notices (
    user    TEXT NOT NULL,
    action  INTEGER NOT NULL,
    sent_at INTEGER NOT NULL,
    PRIMARY KEY (user, action)
) STRICT;
