-- Port labels: a name the user gives an exposed port ("web"), unique
-- among the sandbox's ports, shown on lists and the edge's pages.
ALTER TABLE preview_ports ADD COLUMN name TEXT NOT NULL DEFAULT '';
CREATE UNIQUE INDEX preview_ports_name ON preview_ports (sandbox_id, name) WHERE name <> '';

-- Share links: one exposed port opened to whoever holds the link's
-- secret (only its SHA-256 is kept) until it expires or is revoked.
CREATE TABLE preview_shares (
    id            TEXT PRIMARY KEY,
    sandbox_id    TEXT NOT NULL REFERENCES sandboxes (id),
    account_id    TEXT NOT NULL REFERENCES accounts (id),
    port          INTEGER NOT NULL CHECK (port BETWEEN 1 AND 65535),
    hash          BLOB NOT NULL UNIQUE,
    note          TEXT NOT NULL DEFAULT '',
    created_by    TEXT NOT NULL DEFAULT '',
    created_at    INTEGER NOT NULL,
    expires_at    INTEGER NOT NULL,
    first_used_at INTEGER,
    revoked_at    INTEGER
) STRICT;
CREATE INDEX preview_shares_sandbox ON preview_shares (sandbox_id, created_at);
