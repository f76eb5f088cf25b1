-- Gatehouse state, one SQLite file under $GATEHOUSE_HOME.
-- Every table is STRICT; states and JSON columns are CHECKed so that no code
-- path (nor a hand edit) can store a state the kernel does not understand.

CREATE TABLE IF NOT EXISTS gadgets (
    name         TEXT PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 64),
    digest       TEXT NOT NULL CHECK (length(digest) = 64),
    installed_at INTEGER NOT NULL
) STRICT;

CREATE TABLE IF NOT EXISTS gatekeepers (
    name     TEXT PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 64),
    digest   TEXT NOT NULL CHECK (length(digest) = 64),
    trust    TEXT NOT NULL CHECK (trust IN ('byo', 'vetted')),
    hosts    TEXT NOT NULL CHECK (json_valid(hosts) AND json_type(hosts) = 'array'),
    secret   TEXT,
    settings TEXT NOT NULL CHECK (json_valid(settings) AND json_type(settings) = 'object'),
    manifest TEXT NOT NULL CHECK (json_valid(manifest) AND json_type(manifest) = 'object'),
    added_at INTEGER NOT NULL
) STRICT;

-- Credentials. Only the kernel reads them, to inject them into a
-- gatekeeper's outgoing requests; no component ever receives one.
CREATE TABLE IF NOT EXISTS secrets (
    name  TEXT PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 128),
    value TEXT NOT NULL
) STRICT;

CREATE TABLE IF NOT EXISTS chats (
    name       TEXT PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 64),
    owner      TEXT NOT NULL,
    -- The restricted-data latch (SPEC O3): set once, never cleared.
    latched    INTEGER NOT NULL DEFAULT 0 CHECK (latched IN (0, 1)),
    created_at INTEGER NOT NULL
) STRICT;

CREATE TABLE IF NOT EXISTS introductions (
    chat       TEXT NOT NULL REFERENCES chats(name),
    key        TEXT NOT NULL CHECK (length(key) BETWEEN 1 AND 64),
    gatekeeper TEXT NOT NULL REFERENCES gatekeepers(name),
    -- NULL: every tool; else a JSON array of granted tool names.
    tools      TEXT CHECK (tools IS NULL OR (json_valid(tools) AND json_type(tools) = 'array')),
    introduced_by TEXT NOT NULL,
    PRIMARY KEY (chat, key)
) STRICT;

-- One ledger: actions, observations and hooks share one id sequence
-- (SPEC L1). Ids are unique deployment-wide, so `approve 3` is unambiguous.
CREATE TABLE IF NOT EXISTS ledger (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    chat          TEXT NOT NULL,
    kind          TEXT NOT NULL CHECK (kind IN ('action', 'observation', 'hook')),
    caller        TEXT NOT NULL,
    gatekeeper    TEXT,
    tool          TEXT,
    -- Whose word the classification trusted (SPEC K4); stored, never recomputed.
    classified_by TEXT CHECK (classified_by IN ('server-annotation', 'default')),
    trust         TEXT CHECK (trust IN ('byo', 'vetted')),
    args          TEXT CHECK (args IS NULL OR (json_valid(args) AND json_type(args) = 'object' AND length(CAST(args AS BLOB)) <= 65536)),
    state         TEXT CHECK (state IN ('pending', 'applying', 'applied', 'failed', 'rejected')),
    await_decision INTEGER CHECK (await_decision IN (0, 1)),
    provisional   TEXT CHECK (provisional IS NULL OR json_valid(provisional)),
    retryable     INTEGER CHECK (retryable IN (0, 1)),
    result        TEXT,
    error         TEXT,
    auto_approved INTEGER NOT NULL DEFAULT 0 CHECK (auto_approved IN (0, 1)),
    resolved_by   TEXT,
    -- The process that holds the claim (see store::claim); recovery fails
    -- only claims whose process is gone.
    claim_owner   TEXT,
    -- Observations: what was read, by whom, through which account.
    sources       TEXT CHECK (sources IS NULL OR (json_valid(sources) AND json_type(sources) = 'array')),
    account       TEXT,
    -- Observation of an applied action's result handed to the gadget (SPEC A4).
    action_ref    INTEGER,
    result_bytes  INTEGER,
    created_at    INTEGER NOT NULL,
    decided_at    INTEGER,
    finished_at   INTEGER,
    CHECK ((kind = 'action') = (state IS NOT NULL)),
    CHECK (kind <> 'action' OR args IS NOT NULL)
) STRICT;

CREATE INDEX IF NOT EXISTS ledger_by_chat ON ledger (chat, id);
-- Open actions are looked up on every read (the overlay of pending actions
-- a simulating gatekeeper gets) and at every start (recovery): an index on
-- state, not a partial one, so that `state = 'pending'` can use it.
DROP INDEX IF EXISTS ledger_open;
CREATE INDEX IF NOT EXISTS ledger_by_state ON ledger (state, id);

-- People known to this deployment (SPEC S). A chat's owner is whoever
-- created it; collaborators are people it was shared with.
CREATE TABLE IF NOT EXISTS users (
    name       TEXT PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 64),
    created_at INTEGER NOT NULL
) STRICT;

-- A person's own accounts at a gatekeeper's service. The credential lives
-- in `secrets` under `secret`; only the kernel reads it.
CREATE TABLE IF NOT EXISTS accounts (
    user       TEXT NOT NULL REFERENCES users(name),
    gatekeeper TEXT NOT NULL REFERENCES gatekeepers(name),
    label      TEXT NOT NULL CHECK (length(label) BETWEEN 1 AND 64),
    secret     TEXT NOT NULL REFERENCES secrets(name),
    -- The account used when the person names none; one per gatekeeper.
    is_default INTEGER NOT NULL DEFAULT 0 CHECK (is_default IN (0, 1)),
    created_at INTEGER NOT NULL,
    PRIMARY KEY (user, gatekeeper, label)
) STRICT;

-- Who a chat is shared with (SPEC S). A collaborator is admitted by a
-- successful open, which re-verifies every observed source (S2).
CREATE TABLE IF NOT EXISTS collaborators (
    chat     TEXT NOT NULL REFERENCES chats(name),
    user     TEXT NOT NULL REFERENCES users(name),
    added_by TEXT NOT NULL,
    added_at INTEGER NOT NULL,
    PRIMARY KEY (chat, user)
) STRICT;

-- Share links: whoever presents the token may open the chat (and is then
-- re-verified like any collaborator). Only the token's digest is stored.
CREATE TABLE IF NOT EXISTS share_links (
    digest     TEXT PRIMARY KEY CHECK (length(digest) = 64),
    chat       TEXT NOT NULL REFERENCES chats(name),
    created_by TEXT NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;

-- Observers (SPEC S2, S3, S5): the account through which a collaborator who
-- opened the chat observes it at each of its gatekeepers, and, when the
-- gatekeeper could enumerate it, every source id that account may see.
CREATE TABLE IF NOT EXISTS observers (
    chat       TEXT NOT NULL,
    user       TEXT NOT NULL,
    gatekeeper TEXT NOT NULL,
    account    TEXT,
    scope      TEXT CHECK (scope IS NULL OR (json_valid(scope) AND json_type(scope) = 'array')),
    added_at   INTEGER NOT NULL,
    PRIMARY KEY (chat, user, gatekeeper),
    FOREIGN KEY (chat, user) REFERENCES collaborators(chat, user) ON DELETE CASCADE
) STRICT;

-- Key two of auto-approval (SPEC U1): a person's rule for exactly one
-- namespaced tag `gatekeeper:tool`.
CREATE TABLE IF NOT EXISTS rules (
    tag        TEXT PRIMARY KEY CHECK (instr(tag, ':') > 1),
    enabled_by TEXT NOT NULL,
    enabled_at INTEGER NOT NULL
) STRICT;

-- The agent harness (SPEC V2, V3): a run whose turn ended on actions that
-- await a decision, resumed when all of them are applied.
CREATE TABLE IF NOT EXISTS agent_runs (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    chat       TEXT NOT NULL,
    gadget     TEXT NOT NULL,
    task       TEXT NOT NULL,
    state      TEXT NOT NULL CHECK (state IN ('running', 'waiting', 'done', 'stopped')),
    awaited    TEXT NOT NULL CHECK (json_valid(awaited) AND json_type(awaited) = 'array'),
    turns      INTEGER NOT NULL DEFAULT 0,
    last_output TEXT,
    updated_at INTEGER NOT NULL
) STRICT;

-- Workflows (SPEC G). A published version never changes.
CREATE TABLE IF NOT EXISTS workflows (
    name         TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 64),
    version      INTEGER NOT NULL CHECK (version >= 1),
    design       TEXT NOT NULL CHECK (json_valid(design) AND json_type(design) = 'object'),
    digest       TEXT NOT NULL CHECK (length(digest) = 64),
    published_by TEXT NOT NULL,
    published_at INTEGER NOT NULL,
    PRIMARY KEY (name, version)
) STRICT;
CREATE TRIGGER IF NOT EXISTS workflows_immutable BEFORE UPDATE ON workflows
BEGIN SELECT RAISE(ABORT, 'a published workflow version never changes'); END;

CREATE TABLE IF NOT EXISTS workflow_runs (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    workflow   TEXT NOT NULL,
    version    INTEGER NOT NULL,
    initiator  TEXT NOT NULL,
    chat       TEXT NOT NULL,
    state      TEXT NOT NULL CHECK (state IN ('running', 'waiting', 'done', 'failed')),
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) STRICT;

-- A run's steps, their tool sets fixed from the design at start (G1).
CREATE TABLE IF NOT EXISTS run_steps (
    run      INTEGER NOT NULL REFERENCES workflow_runs(id),
    step     TEXT NOT NULL,
    position INTEGER NOT NULL,
    gadget   TEXT NOT NULL,
    input    TEXT NOT NULL,
    tools    TEXT NOT NULL CHECK (json_valid(tools) AND json_type(tools) = 'array'),
    preds    TEXT NOT NULL CHECK (json_valid(preds) AND json_type(preds) = 'array'),
    status   TEXT NOT NULL CHECK (status IN ('pending', 'gated', 'done', 'failed')),
    attempts INTEGER NOT NULL DEFAULT 0,
    -- Why the step stopped (a gate, a failure); never a call's arguments.
    note     TEXT,
    PRIMARY KEY (run, step)
) STRICT;
CREATE TRIGGER IF NOT EXISTS run_step_tools_fixed BEFORE UPDATE OF tools, gadget, preds ON run_steps
BEGIN SELECT RAISE(ABORT, 'a run step''s tool set never changes'); END;

-- Approval requests and their allowed-calls lists (G2, G4). The list is
-- immutable once requested.
CREATE TABLE IF NOT EXISTS approval_requests (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    run        INTEGER NOT NULL REFERENCES workflow_runs(id),
    step       TEXT NOT NULL,
    allowed    TEXT NOT NULL CHECK (json_valid(allowed) AND json_type(allowed) = 'object'),
    reason     TEXT NOT NULL,
    state      TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'rejected', 'withdrawn', 'replaced')),
    decided_by TEXT,
    decided_at INTEGER,
    created_at INTEGER NOT NULL
) STRICT;
CREATE TRIGGER IF NOT EXISTS approval_list_immutable BEFORE UPDATE OF allowed, run, step, reason ON approval_requests
BEGIN SELECT RAISE(ABORT, 'an allowed-calls list never changes once requested'); END;

-- Certificates issued here (G3), by serial; revoked when their step ends (G6).
CREATE TABLE IF NOT EXISTS certificates (
    serial     TEXT PRIMARY KEY,
    run        INTEGER NOT NULL,
    step       TEXT NOT NULL,
    authority  TEXT NOT NULL,
    tools      TEXT NOT NULL CHECK (json_valid(tools) AND json_type(tools) = 'array'),
    issued_at  INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    revoked_at INTEGER
) STRICT;

-- Every decided call of a workflow step (G7): its certificate and a digest
-- of its arguments, never the arguments; a denial names the failing input
-- and the agreed range, never the value.
CREATE TABLE IF NOT EXISTS invocations (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    run         INTEGER NOT NULL,
    step        TEXT NOT NULL,
    certificate TEXT,
    requests    TEXT NOT NULL CHECK (json_valid(requests) AND json_type(requests) = 'array'),
    authority   TEXT NOT NULL,
    tool        TEXT NOT NULL,
    args_digest TEXT NOT NULL CHECK (length(args_digest) = 64),
    decision    TEXT NOT NULL CHECK (decision IN ('allowed', 'denied')),
    -- An allowed action applied at once: claimed before it is sent (P1).
    state       TEXT CHECK (state IS NULL OR state IN ('applying', 'applied', 'failed')),
    claim_owner TEXT,
    failed_input TEXT,
    reason      TEXT,
    created_at  INTEGER NOT NULL,
    finished_at INTEGER
) STRICT;

-- The web inbox's sign-in (SPEC R3 surface; issue 5). Only digests of the
-- secrets are stored: a copy of this file lets nobody sign in. A one-time
-- sign-in token is spent by the first use; a session expires.
CREATE TABLE IF NOT EXISTS web_signin_tokens (
    digest     TEXT PRIMARY KEY CHECK (length(digest) = 64),
    user       TEXT NOT NULL REFERENCES users(name),
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    used_at    INTEGER
) STRICT;

CREATE TABLE IF NOT EXISTS web_sessions (
    digest     TEXT PRIMARY KEY CHECK (length(digest) = 64),
    user       TEXT NOT NULL REFERENCES users(name),
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
) STRICT;
