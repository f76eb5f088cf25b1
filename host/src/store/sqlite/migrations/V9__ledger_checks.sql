-- Schema 9 (issue 17): the ledger's CHECKs without IN-lists.
--
-- SQLite checks `x IN ('a', 'b', 'c')` against a list of three or more
-- constants by building a temporary b-tree of the list, every time the
-- row is checked: on every INSERT and every UPDATE of the ledger (each
-- read's observation, each stage, each claim and finish). `EXPLAIN` shows
-- it as OpenEphemeral; a profile of one read put opening, filling and
-- freeing that tree at 15-20% of its observation insert. The same rule
-- written as comparisons joined by OR is the same rule (a NULL passes
-- either way: NULL IN (...) and NULL = 'a' OR ... are both NULL) and is
-- checked in place. Two-value lists are already checked in place.
--
-- The ledger is rebuilt as schema 7 rebuilt it (SQLite cannot change a
-- CHECK in place): every row and column as they were, every index and the
-- trigger that keeps the newest entry. Foreign keys are off while it runs
-- and are checked before it commits (`hooks.id` references the ledger).

CREATE TABLE ledger_v9 (
    id            INTEGER PRIMARY KEY,
    chat          TEXT NOT NULL,
    kind          TEXT NOT NULL CHECK (kind = 'action' OR kind = 'observation' OR kind = 'hook'),
    -- The principal as people read it ("alice", "agent run 4 for alice").
    caller        TEXT NOT NULL,
    -- The person the principal acts for: whose accounts it uses.
    person        TEXT NOT NULL,
    gadget        TEXT,
    gatekeeper    TEXT,
    tool          TEXT,
    intro_key     TEXT,
    classified_by TEXT CHECK (classified_by = 'server-annotation' OR classified_by = 'default' OR classified_by = 'simulation'),
    trust         TEXT CHECK (trust IN ('byo', 'vetted')),
    args          TEXT CHECK (args IS NULL OR (json_valid(args) AND json_type(args) = 'object' AND length(CAST(args AS BLOB)) <= 65536)),
    args_digest   TEXT CHECK (args_digest IS NULL OR length(args_digest) = 64),
    state         TEXT CHECK (state = 'pending' OR state = 'applying' OR state = 'applied'
                         OR state = 'failed' OR state = 'rejected' OR state = 'expired'),
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

INSERT INTO ledger_v9 (id, chat, kind, caller, person, gadget, gatekeeper, tool, intro_key,
    classified_by, trust, args, args_digest, state, await_decision, provisional, retryable,
    result, error, auto_approved, resolved_by, claim_owner, facts, note, logical_key, sources,
    account, action_ref, result_bytes, created_at, decided_at, finished_at, reverts, hook)
SELECT id, chat, kind, caller, person, gadget, gatekeeper, tool, intro_key,
    classified_by, trust, args, args_digest, state, await_decision, provisional, retryable,
    result, error, auto_approved, resolved_by, claim_owner, facts, note, logical_key, sources,
    account, action_ref, result_bytes, created_at, decided_at, finished_at, reverts, hook
FROM ledger;

DROP TABLE ledger;
ALTER TABLE ledger_v9 RENAME TO ledger;

CREATE INDEX ledger_by_chat ON ledger (chat, id);
CREATE INDEX ledger_by_state ON ledger (state, id) WHERE state IS NOT NULL;
CREATE INDEX ledger_open_by_chat ON ledger (chat, state, created_at, kind) WHERE kind = 'action';
CREATE UNIQUE INDEX ledger_logical_key ON ledger (logical_key) WHERE logical_key IS NOT NULL;
CREATE INDEX ledger_by_action_ref ON ledger (action_ref) WHERE action_ref IS NOT NULL;
CREATE INDEX ledger_by_reverts ON ledger (reverts) WHERE reverts IS NOT NULL;
CREATE INDEX ledger_by_hook ON ledger (hook, id) WHERE hook IS NOT NULL;

-- The newest entry holds the sequence (schema 7): deleting it would hand
-- its id out again.
CREATE TRIGGER ledger_newest_kept BEFORE DELETE ON ledger
WHEN OLD.id >= (SELECT max(id) FROM ledger)
BEGIN
    SELECT RAISE(ABORT, 'the newest ledger entry is never deleted: its id would be handed out again (SPEC L1)');
END;
