-- Schema 15: gadget storage. A small key-value store per gadget per chat
-- (crate::storage holds its rule). Each value keeps the chat's observation
-- set as it was when the value was written (`observed`, a JSON array of
-- `{gatekeeper, sources}`), so that what was derived from a source is
-- handed only to whoever may see that source. The limits are the kernel's
-- (crate::storage); these CHECKs only back them.
CREATE TABLE IF NOT EXISTS gadget_storage (
    chat       TEXT NOT NULL REFERENCES chats(name),
    gadget     TEXT NOT NULL CHECK (length(gadget) BETWEEN 1 AND 256),
    key        TEXT NOT NULL CHECK (length(CAST(key AS BLOB)) BETWEEN 1 AND 256),
    value      TEXT NOT NULL CHECK (length(CAST(value AS BLOB)) <= 65536),
    observed   TEXT NOT NULL CHECK (json_valid(observed) AND json_type(observed) = 'array'),
    written_by TEXT NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (chat, gadget, key)
) STRICT;
