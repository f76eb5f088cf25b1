-- Schema 14 (issue 44): Web Push. The devices a person asked to be told
-- on, and which waiting action or approval request each device was told
-- of (crate::push; who is told of what is crate::notify's one decision).

-- A device: a browser's push subscription, made on the person's gesture
-- in the inbox. The endpoint (a capability URL of the push service) and
-- the message keys are kept sealed with the operator's key, as one value
-- (`secret`, crate::seal; the place is this table and `id`); the
-- endpoint's SHA-256 keeps one device from being held twice, and the push
-- service's origin is what the device list shows. `failures` and
-- `retry_at` bound the retries of a push service that answered 429 or 5xx.
CREATE TABLE IF NOT EXISTS push_subscriptions (
    id              TEXT PRIMARY KEY CHECK (length(id) = 32),
    user            TEXT NOT NULL REFERENCES users(name),
    endpoint_digest TEXT NOT NULL UNIQUE CHECK (length(endpoint_digest) = 64),
    origin          TEXT NOT NULL CHECK (length(origin) BETWEEN 9 AND 300),
    secret          TEXT NOT NULL CHECK (substr(secret, 1, 12) = 'gh-sealed-1.'),
    created_at      INTEGER NOT NULL,
    last_sent_at    INTEGER,
    failures        INTEGER NOT NULL DEFAULT 0 CHECK (failures >= 0),
    retry_at        INTEGER
) STRICT;

CREATE INDEX IF NOT EXISTS push_subscriptions_by_user ON push_subscriptions (user);

-- Which waiting action or approval request each device was told of. A
-- row lives while its item waits (as `notices` does for the webhook):
-- one that waits again later is told of again.
CREATE TABLE IF NOT EXISTS push_notices (
    subscription TEXT NOT NULL REFERENCES push_subscriptions(id) ON DELETE CASCADE,
    kind         TEXT NOT NULL CHECK (kind IN ('action', 'request')),
    item         INTEGER NOT NULL,
    sent_at      INTEGER NOT NULL,
    PRIMARY KEY (subscription, kind, item)
) STRICT;
