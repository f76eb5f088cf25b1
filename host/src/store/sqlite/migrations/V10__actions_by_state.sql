-- Schema 10 (issue 17): a stage writes two pages, not four.
--
-- A durable stage waits for every page its commit wrote to reach the
-- disk: the row, and one leaf of each index the row belongs to. Until
-- now an action belonged to three: the chat's entries (`ledger_by_chat`),
-- the actions by state (`ledger_by_state`) and the chat's actions by
-- state (`ledger_open_by_chat`), four pages where a bare insert writes
-- one; each page more is more to sync (about 7 µs each at
-- `synchronous=FULL` on the machine these were measured on).
--
-- One index of the actions, keyed by state, then chat, then id, answers
-- what the three answered about actions: every question about a chat's
-- actions names their state (its open ones, the expired ones, the
-- finished ones it keeps, the pending ones a simulation overlays, the
-- earlier ones a rule waits for), and, keyed by id after the chat, gets
-- them in order; the questions across chats name a state and nothing
-- else. The condition is `ledger_by_state`'s (an entry has a state
-- exactly when it is an action, schema 2), so that a question naming a
-- state uses it without naming the kind; the age and the kind are among
-- its columns so that the counts never leave it (schema 8).
--
-- The chat's entries are then asked for only of its observations (what
-- it has read, for lockdown and sharing); the listing of a chat's ledger
-- filters the whole ledger in order and never used that index.
DROP INDEX IF EXISTS ledger_by_state;
DROP INDEX IF EXISTS ledger_open_by_chat;
DROP INDEX IF EXISTS ledger_by_chat;
CREATE INDEX ledger_actions_by_state ON ledger (state, chat, id, created_at, kind) WHERE state IS NOT NULL;
CREATE INDEX ledger_observations_by_chat ON ledger (chat, id) WHERE kind = 'observation';
