-- Schema 3 (issue 12: hostile input).

-- The allowed host credentials go to (SPEC C4); NULL: the only one.
ALTER TABLE gatekeepers ADD COLUMN credential_host TEXT;

-- A hand-over is recorded once per action (SPEC A4): found by its action.
CREATE INDEX IF NOT EXISTS ledger_by_action_ref ON ledger (action_ref) WHERE action_ref IS NOT NULL;

-- CSRF tokens: random secrets of their own, never derived from the
-- session's, minted for each page that asks (GET /api/session) and stored
-- only as digests. A session keeps its newest few.
CREATE TABLE IF NOT EXISTS web_csrf (
    digest     TEXT PRIMARY KEY CHECK (length(digest) = 64),
    session    TEXT NOT NULL REFERENCES web_sessions(digest) ON DELETE CASCADE,
    created_at INTEGER NOT NULL
) STRICT;
CREATE INDEX IF NOT EXISTS web_csrf_by_session ON web_csrf (session, created_at);
