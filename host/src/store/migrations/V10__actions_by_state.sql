-- Schema 10 (issue 17): one index of the actions by state, not two.
--
-- A stage writes every b-tree its new row belongs to, one page each, and
-- a durable stage waits for all of them to reach the disk: the row, the
-- chat's entries (`ledger_by_chat`), the actions by state
-- (`ledger_by_state`) and the chat's actions by state
-- (`ledger_open_by_chat`), four pages where a bare insert writes one. The
-- last two differ only in their order: by state across the deployment,
-- by chat then state within a chat. Keyed by state, then chat, then age,
-- one index answers both: every question about a chat's actions names
-- their state (the count of open ones and the expired ones search one
-- state at a time; a chat's finished ones are four searches), and the
-- questions across chats name a state and nothing else. A stage writes
-- three pages.
--
-- The condition is the one `ledger_by_state` had (an entry has a state
-- exactly when it is an action, schema 2), so that a question naming a
-- state uses it without naming the kind; the kind is among its columns
-- so that the counts never leave it (schema 8).
DROP INDEX IF EXISTS ledger_by_state;
DROP INDEX IF EXISTS ledger_open_by_chat;
CREATE INDEX ledger_actions_by_state ON ledger (state, chat, id, created_at, kind) WHERE state IS NOT NULL;
