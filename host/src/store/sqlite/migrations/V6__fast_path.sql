-- Schema 6 (issue 17): the fast path.

-- Only actions have a state. Every observation (most of the ledger) used
-- to add a (NULL, id) entry to this index, one more page written by every
-- read's commit; every query of it names a state, so the partial index
-- serves them all.
DROP INDEX IF EXISTS ledger_by_state;
CREATE INDEX ledger_by_state ON ledger (state, id) WHERE state IS NOT NULL;

-- What a durability barrier writes (Store::sync): a commit that changes
-- nothing is not synced, so a barrier with no stage beside it in its
-- group commit moves this counter, and its fsync makes every earlier
-- commit in the log durable.
CREATE TABLE IF NOT EXISTS durability_mark (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    n  INTEGER NOT NULL
) STRICT;
INSERT INTO durability_mark (id, n) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;

-- The policy epoch.
--
-- Resolving a key (SPEC C2-C5) reads seven tables: the introduction, its
-- gatekeeper and trust tier, the chat's owner and latch, its
-- collaborators, a collaborator's chosen account, the person's accounts
-- and the secrets behind credentials. A read or stage made that trip on
-- every call. Now every change to any of those tables, by any process,
-- moves one counter in the same transaction, and a process keeps what it
-- resolved beside the counter it read it under: while the counter stands
-- still, nothing a resolution depends on has changed, so it is reused;
-- once it moves, everything is read again. A table added to resolution
-- must get the same three triggers (the store's test lists them).
CREATE TABLE IF NOT EXISTS policy_epoch (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    n  INTEGER NOT NULL
) STRICT;
INSERT INTO policy_epoch (id, n) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;

CREATE TRIGGER IF NOT EXISTS policy_epoch_introductions_insert AFTER INSERT ON introductions
BEGIN UPDATE policy_epoch SET n = n + 1 WHERE id = 1; END;
CREATE TRIGGER IF NOT EXISTS policy_epoch_introductions_update AFTER UPDATE ON introductions
BEGIN UPDATE policy_epoch SET n = n + 1 WHERE id = 1; END;
CREATE TRIGGER IF NOT EXISTS policy_epoch_introductions_delete AFTER DELETE ON introductions
BEGIN UPDATE policy_epoch SET n = n + 1 WHERE id = 1; END;
CREATE TRIGGER IF NOT EXISTS policy_epoch_gatekeepers_insert AFTER INSERT ON gatekeepers
BEGIN UPDATE policy_epoch SET n = n + 1 WHERE id = 1; END;
CREATE TRIGGER IF NOT EXISTS policy_epoch_gatekeepers_update AFTER UPDATE ON gatekeepers
BEGIN UPDATE policy_epoch SET n = n + 1 WHERE id = 1; END;
CREATE TRIGGER IF NOT EXISTS policy_epoch_gatekeepers_delete AFTER DELETE ON gatekeepers
BEGIN UPDATE policy_epoch SET n = n + 1 WHERE id = 1; END;
CREATE TRIGGER IF NOT EXISTS policy_epoch_chats_insert AFTER INSERT ON chats
BEGIN UPDATE policy_epoch SET n = n + 1 WHERE id = 1; END;
CREATE TRIGGER IF NOT EXISTS policy_epoch_chats_update AFTER UPDATE ON chats
BEGIN UPDATE policy_epoch SET n = n + 1 WHERE id = 1; END;
CREATE TRIGGER IF NOT EXISTS policy_epoch_chats_delete AFTER DELETE ON chats
BEGIN UPDATE policy_epoch SET n = n + 1 WHERE id = 1; END;
CREATE TRIGGER IF NOT EXISTS policy_epoch_collaborators_insert AFTER INSERT ON collaborators
BEGIN UPDATE policy_epoch SET n = n + 1 WHERE id = 1; END;
CREATE TRIGGER IF NOT EXISTS policy_epoch_collaborators_update AFTER UPDATE ON collaborators
BEGIN UPDATE policy_epoch SET n = n + 1 WHERE id = 1; END;
CREATE TRIGGER IF NOT EXISTS policy_epoch_collaborators_delete AFTER DELETE ON collaborators
BEGIN UPDATE policy_epoch SET n = n + 1 WHERE id = 1; END;
CREATE TRIGGER IF NOT EXISTS policy_epoch_observers_insert AFTER INSERT ON observers
BEGIN UPDATE policy_epoch SET n = n + 1 WHERE id = 1; END;
CREATE TRIGGER IF NOT EXISTS policy_epoch_observers_update AFTER UPDATE ON observers
BEGIN UPDATE policy_epoch SET n = n + 1 WHERE id = 1; END;
CREATE TRIGGER IF NOT EXISTS policy_epoch_observers_delete AFTER DELETE ON observers
BEGIN UPDATE policy_epoch SET n = n + 1 WHERE id = 1; END;
CREATE TRIGGER IF NOT EXISTS policy_epoch_accounts_insert AFTER INSERT ON accounts
BEGIN UPDATE policy_epoch SET n = n + 1 WHERE id = 1; END;
CREATE TRIGGER IF NOT EXISTS policy_epoch_accounts_update AFTER UPDATE ON accounts
BEGIN UPDATE policy_epoch SET n = n + 1 WHERE id = 1; END;
CREATE TRIGGER IF NOT EXISTS policy_epoch_accounts_delete AFTER DELETE ON accounts
BEGIN UPDATE policy_epoch SET n = n + 1 WHERE id = 1; END;
CREATE TRIGGER IF NOT EXISTS policy_epoch_secrets_insert AFTER INSERT ON secrets
BEGIN UPDATE policy_epoch SET n = n + 1 WHERE id = 1; END;
CREATE TRIGGER IF NOT EXISTS policy_epoch_secrets_update AFTER UPDATE ON secrets
BEGIN UPDATE policy_epoch SET n = n + 1 WHERE id = 1; END;
CREATE TRIGGER IF NOT EXISTS policy_epoch_secrets_delete AFTER DELETE ON secrets
BEGIN UPDATE policy_epoch SET n = n + 1 WHERE id = 1; END;
