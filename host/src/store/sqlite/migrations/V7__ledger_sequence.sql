-- Schema 7 (issue 17): the ledger without AUTOINCREMENT.
--
-- AUTOINCREMENT keeps the highest id ever handed out in `sqlite_sequence`
-- and rewrites that row in every insert: one more page in the commit of
-- every read's observation and every stage (three pages where two do, and
-- a third more checkpointing). Without it SQLite hands out one more than
-- the highest id in the table, which is the same promise (an id is never
-- reused, SPEC L1) as long as the newest entry is never deleted: pruning
-- keeps the newest finished actions of every chat and never touches an
-- observation, an open action or a hook, and the trigger below refuses any
-- other deletion of the newest entry.
--
-- The ledger is rebuilt (SQLite cannot drop AUTOINCREMENT in place): every
-- row, column and CHECK as they were. `hooks.id` references the ledger:
-- migrations run with foreign keys off and are checked before they commit
-- (`PRAGMA foreign_key_check`, SQLite's own procedure for a rebuild).

CREATE TABLE ledger_v7 (
    id            INTEGER PRIMARY KEY,
    chat          TEXT NOT NULL,
    kind          TEXT NOT NULL CHECK (kind IN ('action', 'observation', 'hook')),
    -- The principal as people read it ("alice", "agent run 4 for alice").
    caller        TEXT NOT NULL,
    -- The person the principal acts for: whose accounts it uses.
    person        TEXT NOT NULL,
    gadget        TEXT,
    gatekeeper    TEXT,
    tool          TEXT,
    intro_key     TEXT,
    classified_by TEXT CHECK (classified_by IN ('server-annotation', 'default', 'simulation')),
    trust         TEXT CHECK (trust IN ('byo', 'vetted')),
    args          TEXT CHECK (args IS NULL OR (json_valid(args) AND json_type(args) = 'object' AND length(CAST(args AS BLOB)) <= 65536)),
    args_digest   TEXT CHECK (args_digest IS NULL OR length(args_digest) = 64),
    state         TEXT CHECK (state IN ('pending', 'applying', 'applied', 'failed', 'rejected', 'expired')),
    await_decision INTEGER CHECK (await_decision IN (0, 1)),
    provisional   TEXT CHECK (provisional IS NULL OR json_valid(provisional)),
    retryable     INTEGER CHECK (retryable IN (0, 1)),
    result        TEXT,
    error         TEXT,
    auto_approved INTEGER NOT NULL DEFAULT 0 CHECK (auto_approved IN (0, 1)),
    resolved_by   TEXT,
    claim_owner   TEXT,
    -- What was true at staging (SPEC P7); a JSON object of fingerprints.
    facts         TEXT CHECK (facts IS NULL OR (json_valid(facts) AND json_type(facts) = 'object')),
    -- Why the last claim sent the action back to pending (what changed).
    note          TEXT,
    -- A workflow call's identity across re-runs of its step (SPEC G8).
    logical_key   TEXT,
    sources       TEXT CHECK (sources IS NULL OR (json_valid(sources) AND json_type(sources) = 'array')),
    account       TEXT,
    action_ref    INTEGER,
    result_bytes  INTEGER,
    created_at    INTEGER NOT NULL,
    decided_at    INTEGER,
    finished_at   INTEGER,
    -- The action a revert undoes (schema 4).
    reverts       INTEGER,
    -- The hook whose turn wrote this entry (schema 5).
    hook          INTEGER,
    CHECK ((kind = 'action') = (state IS NOT NULL)),
    CHECK (kind <> 'action' OR args IS NOT NULL)
) STRICT;

INSERT INTO ledger_v7 (id, chat, kind, caller, person, gadget, gatekeeper, tool, intro_key,
    classified_by, trust, args, args_digest, state, await_decision, provisional, retryable,
    result, error, auto_approved, resolved_by, claim_owner, facts, note, logical_key, sources,
    account, action_ref, result_bytes, created_at, decided_at, finished_at, reverts, hook)
SELECT id, chat, kind, caller, person, gadget, gatekeeper, tool, intro_key,
    classified_by, trust, args, args_digest, state, await_decision, provisional, retryable,
    result, error, auto_approved, resolved_by, claim_owner, facts, note, logical_key, sources,
    account, action_ref, result_bytes, created_at, decided_at, finished_at, reverts, hook
FROM ledger;

-- Ids above the highest row left were handed out once (rows deleted by
-- hand before this version): an entry at the highest id ever handed out
-- keeps them from being handed out again. Gatehouse itself never deletes
-- the newest entry, so this adds nothing to a home it kept.
INSERT INTO ledger_v7 (id, chat, kind, caller, person, sources, created_at)
SELECT s.seq, '', 'observation', 'gatehouse', 'gatehouse', '[]',
       CAST(strftime('%s', 'now') AS INTEGER) * 1000
FROM sqlite_sequence s
WHERE s.name = 'ledger' AND s.seq > (SELECT COALESCE(max(id), 0) FROM ledger);

DROP TABLE ledger;
ALTER TABLE ledger_v7 RENAME TO ledger;

CREATE INDEX ledger_by_chat ON ledger (chat, id);
CREATE INDEX ledger_by_state ON ledger (state, id) WHERE state IS NOT NULL;
CREATE INDEX ledger_open_by_chat ON ledger (chat, state) WHERE kind = 'action';
CREATE UNIQUE INDEX ledger_logical_key ON ledger (logical_key) WHERE logical_key IS NOT NULL;
CREATE INDEX ledger_by_action_ref ON ledger (action_ref) WHERE action_ref IS NOT NULL;
CREATE INDEX ledger_by_reverts ON ledger (reverts) WHERE reverts IS NOT NULL;
CREATE INDEX ledger_by_hook ON ledger (hook, id) WHERE hook IS NOT NULL;

-- The newest entry holds the sequence: deleting it would hand its id out
-- again.
CREATE TRIGGER ledger_newest_kept BEFORE DELETE ON ledger
WHEN OLD.id >= (SELECT max(id) FROM ledger)
BEGIN
    SELECT RAISE(ABORT, 'the newest ledger entry is never deleted: its id would be handed out again (SPEC L1)');
END;
