-- The open-action count answered from the index (SQLite's schema 8): the
-- age of each open action is in the index, so counting a chat's open
-- actions never fetches their rows.
DROP INDEX IF EXISTS ledger_open_by_chat;
CREATE INDEX ledger_open_by_chat ON ledger (chat, state) INCLUDE (created_at) WHERE kind = 'action';
