-- Schema 7: gadget storage, as ../V15__gadget_storage.sql: a small
-- key-value store per gadget per chat, each value with the chat's
-- observation set as it was when the value was written.
CREATE TABLE gadget_storage (
    chat       TEXT NOT NULL REFERENCES chats(name),
    gadget     TEXT NOT NULL CHECK (length(gadget) BETWEEN 1 AND 256),
    key        TEXT NOT NULL CHECK (octet_length(key) BETWEEN 1 AND 256),
    value      TEXT NOT NULL CHECK (octet_length(value) <= 65536),
    observed   TEXT NOT NULL CHECK (json_typeof(observed::json) = 'array'),
    written_by TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (chat, gadget, key)
);
