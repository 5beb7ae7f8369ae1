-- SSH credentials minted by POST /sandboxes/{id}/ssh_tokens. Only the public
-- key's SHA-256 fingerprint is kept; the private key is never stored.
CREATE TABLE ssh_credentials (
    id          TEXT PRIMARY KEY,
    sandbox_id  TEXT NOT NULL REFERENCES sandboxes (id),
    account_id  TEXT NOT NULL REFERENCES accounts (id),
    fingerprint TEXT NOT NULL UNIQUE,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
) STRICT;
CREATE INDEX ssh_credentials_sandbox ON ssh_credentials (sandbox_id);
