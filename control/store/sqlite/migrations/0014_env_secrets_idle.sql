-- A sandbox's environment (set in every process), the account secrets it
-- names (name and how each is delivered; never a value), its own idle
-- timeout (0: the account's), whether running work keeps it awake
-- (ignore_busy 0, the default, means it does), and how many days it
-- may stay suspended before it is deleted (0: until its deadline).
-- retention_warned_at is when the day-before event was written.
ALTER TABLE sandboxes ADD COLUMN env TEXT NOT NULL DEFAULT '{}';
ALTER TABLE sandboxes ADD COLUMN secret_refs TEXT NOT NULL DEFAULT '[]';
ALTER TABLE sandboxes ADD COLUMN idle_timeout_seconds INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN ignore_busy INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN retention_days INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN retention_warned_at INTEGER;
-- Account secrets: the value sealed with AES-GCM under the operator's key
-- (nonce first), never stored or returned in the clear.
CREATE TABLE account_secrets (
    account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    sealed     BLOB NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (account_id, name)
) STRICT;
