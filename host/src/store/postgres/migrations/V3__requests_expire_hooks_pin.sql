-- SQLite's schema 11 (see ../V11__requests_expire_hooks_pin.sql): approval
-- requests expire like actions and keep who approved them; notices of
-- waiting requests; a hook runs the code it was enabled for.

ALTER TABLE approval_requests DROP CONSTRAINT approval_requests_state_check;
ALTER TABLE approval_requests ADD CONSTRAINT approval_requests_state_check
    CHECK (state IN ('pending', 'approved', 'rejected', 'withdrawn', 'replaced', 'expired'));
ALTER TABLE approval_requests ADD COLUMN approved_by TEXT;
ALTER TABLE approval_requests ADD COLUMN approved_at BIGINT;
UPDATE approval_requests SET approved_by = decided_by, approved_at = decided_at
WHERE state = 'approved' AND decided_by IS NOT NULL AND decided_at IS NOT NULL;
ALTER TABLE approval_requests ADD CONSTRAINT approval_requests_approved_check
    CHECK ((approved_by IS NULL) = (approved_at IS NULL));
CREATE TRIGGER approval_approver_kept BEFORE UPDATE OF approved_by, approved_at ON approval_requests
FOR EACH ROW
WHEN (OLD.approved_by IS NOT NULL
      AND (NEW.approved_by IS DISTINCT FROM OLD.approved_by
           OR NEW.approved_at IS DISTINCT FROM OLD.approved_at))
EXECUTE FUNCTION gatehouse_refuse_change('who approved a request is never rewritten');

CREATE INDEX approval_requests_pending ON approval_requests (created_at) WHERE state = 'pending';
CREATE INDEX approval_requests_by_approver ON approval_requests (approved_by, id)
    WHERE approved_by IS NOT NULL;

CREATE TABLE request_notices (
    "user"  TEXT NOT NULL,
    request BIGINT NOT NULL,
    sent_at BIGINT NOT NULL,
    PRIMARY KEY ("user", request)
);

ALTER TABLE hooks ADD COLUMN gadget_digest TEXT
    CHECK (gadget_digest IS NULL OR length(gadget_digest) = 64);
UPDATE hooks SET gadget_digest = (SELECT digest FROM gadgets WHERE gadgets.name = hooks.gadget);
