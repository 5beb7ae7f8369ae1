-- SSH credentials minted by POST /sandboxes/{id}/ssh_tokens. Only the public
-- key's SHA-256 fingerprint is kept; the private key is never stored.
CREATE TABLE ssh_credentials (
    id          text PRIMARY KEY,
    sandbox_id  text NOT NULL REFERENCES sandboxes (id),
    account_id  text NOT NULL REFERENCES accounts (id),
    fingerprint text NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);
CREATE INDEX ssh_credentials_sandbox ON ssh_credentials (sandbox_id);
