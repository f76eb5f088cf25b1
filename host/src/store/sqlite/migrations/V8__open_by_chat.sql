-- Schema 8 (issue 17): the open-action count answered from the index.
--
-- Every stage counts its chat's open actions three times (refused from a
-- read before it queues, then, in the staging transaction, the expired
-- swept and the cap checked again), two of them under the write lock.
-- Each count filters pending actions by their age (SPEC H3), and
-- `created_at` was not in this index: every open action of the chat cost
-- a lookup of its ledger row, so a stage into a chat holding 40 pending
-- paid 120 row lookups. With the age and the kind in the index the counts
-- never leave it (SQLite's plan says COVERING INDEX; the kind is the
-- index's own condition, but SQLite only calls an index covering when
-- every column the query names is in it).
DROP INDEX IF EXISTS ledger_open_by_chat;
CREATE INDEX ledger_open_by_chat ON ledger (chat, state, created_at, kind) WHERE kind = 'action';
