-- Sign-in people already use (issue 44): passkeys, and the bindings an
-- operator makes from an identity at an OpenID Connect issuer to a person.
-- The same tables as the embedded schema's version 13 (see its comments):
-- nothing here signs anyone in by itself.
CREATE TABLE web_passkeys (
    credential TEXT PRIMARY KEY CHECK (length(credential) BETWEEN 1 AND 1400),
    "user"     TEXT NOT NULL REFERENCES users(name),
    handle     TEXT NOT NULL CHECK (length(handle) = 36),
    label      TEXT NOT NULL CHECK (length(label) BETWEEN 1 AND 64),
    passkey    TEXT NOT NULL CHECK (length(passkey) <= 16384),
    created_at BIGINT NOT NULL,
    used_at    BIGINT
);
CREATE INDEX web_passkeys_by_user ON web_passkeys ("user");

CREATE TABLE identity_bindings (
    issuer     TEXT NOT NULL CHECK (length(issuer) BETWEEN 1 AND 2048),
    subject    TEXT NOT NULL CHECK (length(subject) BETWEEN 1 AND 255),
    "user"     TEXT NOT NULL REFERENCES users(name),
    bound_by   TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (issuer, subject)
);
CREATE INDEX identity_bindings_by_user ON identity_bindings ("user");
