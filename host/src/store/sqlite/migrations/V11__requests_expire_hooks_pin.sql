-- Schema 11 (issue 43): approval requests expire like actions and keep
-- who approved them; notices of waiting requests; a hook runs the code it
-- was enabled for.

-- Approval requests (G2), rebuilt (SQLite cannot change a CHECK in place):
-- `expired` joins the states (SPEC H3's parity: a request nobody decided
-- within its run's chat's expiry can no longer be approved), and who
-- approved a request, and when, is kept in columns of its own that
-- nothing clears: a withdrawal, a replacement or an expiry later rewrites
-- `state` and `decided_by`, never `approved_by` (`log --approved-by`,
-- SPEC L2, reads it). A request approved before this schema and since
-- withdrawn or replaced kept no record of its approver; only those still
-- `approved` are carried over as approved. Every row, id and the id
-- sequence are kept, and the trigger that keeps a list unchanged.
CREATE TABLE approval_requests_v11 (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    run         INTEGER NOT NULL REFERENCES workflow_runs(id),
    step        TEXT NOT NULL,
    allowed     TEXT NOT NULL CHECK (json_valid(allowed) AND json_type(allowed) = 'object'),
    reason      TEXT NOT NULL,
    state       TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'rejected', 'withdrawn', 'replaced', 'expired')),
    decided_by  TEXT,
    decided_at  INTEGER,
    created_at  INTEGER NOT NULL,
    approved_by TEXT,
    approved_at INTEGER,
    CHECK ((approved_by IS NULL) = (approved_at IS NULL))
) STRICT;

INSERT INTO approval_requests_v11 (id, run, step, allowed, reason, state, decided_by,
    decided_at, created_at, approved_by, approved_at)
SELECT id, run, step, allowed, reason, state, decided_by, decided_at, created_at,
    CASE WHEN state = 'approved' AND decided_by IS NOT NULL AND decided_at IS NOT NULL THEN decided_by END,
    CASE WHEN state = 'approved' AND decided_by IS NOT NULL AND decided_at IS NOT NULL THEN decided_at END
FROM approval_requests;

-- The id sequence goes on from where it was, not from the highest id kept.
INSERT INTO sqlite_sequence (name, seq)
SELECT 'approval_requests_v11', 0
WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'approval_requests_v11');
UPDATE sqlite_sequence
SET seq = max(seq, COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'approval_requests'), 0))
WHERE name = 'approval_requests_v11';

DROP TABLE approval_requests;
ALTER TABLE approval_requests_v11 RENAME TO approval_requests;

CREATE TRIGGER approval_list_immutable BEFORE UPDATE OF allowed, run, step, reason ON approval_requests
BEGIN SELECT RAISE(ABORT, 'an allowed-calls list never changes once requested'); END;
CREATE TRIGGER approval_approver_kept BEFORE UPDATE OF approved_by, approved_at ON approval_requests
WHEN OLD.approved_by IS NOT NULL
    AND (NEW.approved_by IS NOT OLD.approved_by OR NEW.approved_at IS NOT OLD.approved_at)
BEGIN SELECT RAISE(ABORT, 'who approved a request is never rewritten'); END;

-- The pending requests, for the expiry sweep and the notices; the
-- approved ones by approver, for `log --approved-by`.
CREATE INDEX approval_requests_pending ON approval_requests (created_at) WHERE state = 'pending';
CREATE INDEX approval_requests_by_approver ON approval_requests (approved_by, id)
    WHERE approved_by IS NOT NULL;

-- Which waiting approval request each person was told of (`notices` is
-- the same for actions; a request's id is from another sequence). A row
-- lives while its request waits.
CREATE TABLE request_notices (
    user    TEXT NOT NULL,
    request INTEGER NOT NULL,
    sent_at INTEGER NOT NULL,
    PRIMARY KEY (user, request)
) STRICT;

-- The code a hook runs: the digest of its gadget's component when it was
-- added, and again when it was (last) enabled. A turn runs exactly that
-- component; a gadget re-installed under the same name since is not run
-- until a person enables the hook again, shown the new digest. Hooks
-- made before this schema are pinned to what their gadget's name names
-- now: the code they would have run next.
ALTER TABLE hooks ADD COLUMN gadget_digest TEXT
    CHECK (gadget_digest IS NULL OR length(gadget_digest) = 64);
UPDATE hooks SET gadget_digest = (SELECT digest FROM gadgets WHERE gadgets.name = hooks.gadget);
