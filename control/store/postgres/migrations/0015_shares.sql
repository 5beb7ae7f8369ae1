-- Port labels: a name the user gives an exposed port ("web"), unique
-- among the sandbox's ports, shown on lists and the edge's pages.
ALTER TABLE preview_ports ADD COLUMN name text NOT NULL DEFAULT '';
CREATE UNIQUE INDEX preview_ports_name ON preview_ports (sandbox_id, name) WHERE name <> '';

-- Share links: one exposed port opened to whoever holds the link's
-- secret (only its SHA-256 is kept) until it expires or is revoked.
CREATE TABLE preview_shares (
    id            text PRIMARY KEY,
    sandbox_id    text NOT NULL REFERENCES sandboxes (id),
    account_id    text NOT NULL REFERENCES accounts (id),
    port          integer NOT NULL CHECK (port BETWEEN 1 AND 65535),
    hash          bytea NOT NULL UNIQUE,
    note          text NOT NULL DEFAULT '',
    created_by    text NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL,
    first_used_at timestamptz,
    revoked_at    timestamptz
);
CREATE INDEX preview_shares_sandbox ON preview_shares (sandbox_id, created_at);
