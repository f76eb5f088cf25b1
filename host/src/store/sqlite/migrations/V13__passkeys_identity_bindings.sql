-- Sign-in people already use (issue 44): passkeys, and the bindings an
-- operator makes from an identity at an OpenID Connect issuer to a person.
--
-- Nothing here signs anyone in by itself: a passkey row keeps the
-- credential's id, its public key and its signature counter (the private
-- key never leaves the person's authenticator), and a binding only says
-- whose identity at an issuer is which person. `handle` is the random
-- WebAuthn user handle of the person (the same on each of their passkeys),
-- never their name. Written to run again harmlessly, as version 12 is (a
-- home set back to an older version runs the newer ones again).
CREATE TABLE IF NOT EXISTS web_passkeys (
    credential TEXT PRIMARY KEY CHECK (length(credential) BETWEEN 1 AND 1400),
    "user"     TEXT NOT NULL REFERENCES users(name),
    handle     TEXT NOT NULL CHECK (length(handle) = 36),
    label      TEXT NOT NULL CHECK (length(label) BETWEEN 1 AND 64),
    passkey    TEXT NOT NULL CHECK (length(passkey) <= 16384),
    created_at INTEGER NOT NULL,
    used_at    INTEGER
) STRICT;
CREATE INDEX IF NOT EXISTS web_passkeys_by_user ON web_passkeys ("user");

CREATE TABLE IF NOT EXISTS identity_bindings (
    issuer     TEXT NOT NULL CHECK (length(issuer) BETWEEN 1 AND 2048),
    subject    TEXT NOT NULL CHECK (length(subject) BETWEEN 1 AND 255),
    "user"     TEXT NOT NULL REFERENCES users(name),
    bound_by   TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (issuer, subject)
) STRICT;
CREATE INDEX IF NOT EXISTS identity_bindings_by_user ON identity_bindings ("user");
