-- Version 2: principals, the one authorization rule, the one send path.
--
-- * Every ledger row records its principal (`caller`, as people read it),
--   the person it acts for (`person`: whose accounts it uses, SPEC C5) and
--   the gadget, if any.
-- * An action keeps what was true when it was staged (`facts`), so that the
--   claim can revalidate it before anything leaves (SPEC P7), the key it was
--   staged through, a digest of its arguments, the note of the last
--   revalidation that sent it back to pending, and, for a workflow call, the
--   logical key that keeps a re-run from sending it twice (SPEC G8).
-- * A simulation's hand-over is recorded under its own label.
-- * `expired` is a state (SPEC H3) so that no later rebuild is needed.
-- SQLite cannot change a CHECK in place, so the ledger is rebuilt.

CREATE TABLE ledger_v2 (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
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
    CHECK ((kind = 'action') = (state IS NOT NULL)),
    CHECK (kind <> 'action' OR args IS NOT NULL)
) STRICT;

INSERT INTO ledger_v2 (id, chat, kind, caller, person, gadget, gatekeeper, tool, classified_by,
    trust, args, state, await_decision, provisional, retryable, result, error, auto_approved,
    resolved_by, claim_owner, sources, account, action_ref, result_bytes, created_at,
    decided_at, finished_at)
SELECT l.id, l.chat, l.kind, l.caller, COALESCE(c.owner, ''),
    CASE WHEN l.caller LIKE 'gadget:%' THEN substr(l.caller, 8) END,
    l.gatekeeper, l.tool, l.classified_by, l.trust, l.args, l.state, l.await_decision,
    l.provisional, l.retryable, l.result, l.error, l.auto_approved, l.resolved_by,
    l.claim_owner, l.sources, l.account, l.action_ref, l.result_bytes, l.created_at,
    l.decided_at, l.finished_at
FROM ledger l LEFT JOIN chats c ON c.name = l.chat;

DROP TABLE ledger;
ALTER TABLE ledger_v2 RENAME TO ledger;
CREATE INDEX ledger_by_chat ON ledger (chat, id);
CREATE INDEX ledger_by_state ON ledger (state, id);
-- The open actions of one chat: the per-chat cap (SPEC A5) and the drain.
CREATE INDEX ledger_open_by_chat ON ledger (chat, state) WHERE kind = 'action';
CREATE UNIQUE INDEX ledger_logical_key ON ledger (logical_key) WHERE logical_key IS NOT NULL;

-- The decision history (SPEC P5, L2): who decided what, when, with a digest
-- of the arguments. Never pruned, whatever happens to the action's payload.
CREATE TABLE decisions (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    action      INTEGER NOT NULL,
    chat        TEXT NOT NULL,
    gatekeeper  TEXT NOT NULL,
    tool        TEXT NOT NULL,
    decision    TEXT NOT NULL CHECK (decision IN ('approved', 'rejected', 'auto-approved', 'workflow-approved')),
    by          TEXT NOT NULL,
    args_digest TEXT NOT NULL CHECK (length(args_digest) = 64),
    outcome     TEXT CHECK (outcome IS NULL OR outcome IN ('applied', 'failed', 'rejected')),
    at          INTEGER NOT NULL
) STRICT;
CREATE INDEX decisions_by_person ON decisions (by, id);
CREATE INDEX decisions_by_action ON decisions (action);

-- A rule belongs to its person and applies in the chats they own, or in
-- one named chat (SPEC U1).
CREATE TABLE rules_v2 (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    tag        TEXT NOT NULL CHECK (instr(tag, ':') > 1),
    person     TEXT NOT NULL,
    -- NULL: every chat the person owns.
    chat       TEXT,
    enabled_at INTEGER NOT NULL
) STRICT;
INSERT INTO rules_v2 (tag, person, chat, enabled_at)
    SELECT tag, enabled_by, NULL, enabled_at FROM rules;
DROP TABLE rules;
ALTER TABLE rules_v2 RENAME TO rules;
CREATE UNIQUE INDEX rules_one_per_scope ON rules (tag, person, COALESCE(chat, ''));

-- A collaborator sees a chat only once they passed re-verification (SPEC
-- W2, S2), and decides only when the owner granted it. Existing
-- collaborators must open again (the safe side).
ALTER TABLE collaborators ADD COLUMN verified_at INTEGER;
ALTER TABLE collaborators ADD COLUMN may_decide INTEGER NOT NULL DEFAULT 0 CHECK (may_decide IN (0, 1));

-- An agent run acts for a person (SPEC C5).
ALTER TABLE agent_runs ADD COLUMN person TEXT;
UPDATE agent_runs SET person = (SELECT owner FROM chats WHERE chats.name = agent_runs.chat);

-- A covered workflow call's audit row names the ledger action that carries
-- its claim and outcome (one send path, SPEC P7).
ALTER TABLE invocations ADD COLUMN action INTEGER;
UPDATE invocations SET state = 'failed', finished_at = created_at,
    reason = 'failed: interrupted after sending (found applying when this host was upgraded)'
  WHERE state = 'applying';

-- A manifest is parsed once per process and shared (it may list thousands
-- of tools); its digest names it. NULL (rows from version 1): parsed on
-- every use until the gatekeeper is added again.
ALTER TABLE gatekeepers ADD COLUMN manifest_digest TEXT CHECK (manifest_digest IS NULL OR length(manifest_digest) = 64);

-- The people a workflow run's initiator named to decide its approval
-- requests (SPEC W1, G2): they see and decide the requests, nothing else.
CREATE TABLE approvers (
    chat     TEXT NOT NULL REFERENCES chats(name),
    person   TEXT NOT NULL REFERENCES users(name),
    added_by TEXT NOT NULL,
    added_at INTEGER NOT NULL,
    PRIMARY KEY (chat, person)
) STRICT;
