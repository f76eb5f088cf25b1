-- Schema 6 (issue 44): Web Push, as ../V14__push_subscriptions.sql: the
-- devices a person asked to be told on (the endpoint and message keys
-- sealed as one value), and which waiting action or approval request
-- each device was told of.
CREATE TABLE push_subscriptions (
    id              TEXT PRIMARY KEY CHECK (length(id) = 32),
    "user"          TEXT NOT NULL REFERENCES users(name),
    endpoint_digest TEXT NOT NULL UNIQUE CHECK (length(endpoint_digest) = 64),
    origin          TEXT NOT NULL CHECK (length(origin) BETWEEN 9 AND 300),
    secret          TEXT NOT NULL CHECK (substr(secret, 1, 12) = 'gh-sealed-1.'),
    created_at      BIGINT NOT NULL,
    last_sent_at    BIGINT,
    failures        BIGINT NOT NULL DEFAULT 0 CHECK (failures >= 0),
    retry_at        BIGINT
);

CREATE INDEX push_subscriptions_by_user ON push_subscriptions ("user");

CREATE TABLE push_notices (
    subscription TEXT NOT NULL REFERENCES push_subscriptions(id) ON DELETE CASCADE,
    kind         TEXT NOT NULL CHECK (kind IN ('action', 'request')),
    item         BIGINT NOT NULL,
    sent_at      BIGINT NOT NULL,
    PRIMARY KEY (subscription, kind, item)
);
