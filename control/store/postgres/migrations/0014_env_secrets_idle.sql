-- A sandbox's environment (set in every process), the account secrets it
-- names (name and how each is delivered; never a value), its own idle
-- timeout (0: the account's), whether running work keeps it awake
-- (ignore_busy false, the default, means it does), and how many days it
-- may stay suspended before it is deleted (0: until its deadline).
-- retention_warned_at is when the day-before event was written.
ALTER TABLE sandboxes ADD COLUMN env jsonb NOT NULL DEFAULT '{}';
ALTER TABLE sandboxes ADD COLUMN secret_refs jsonb NOT NULL DEFAULT '[]';
ALTER TABLE sandboxes ADD COLUMN idle_timeout_seconds integer NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN ignore_busy boolean NOT NULL DEFAULT false;
ALTER TABLE sandboxes ADD COLUMN retention_days integer NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN retention_warned_at timestamptz;
-- Account secrets: the value sealed with AES-GCM under the operator's key
-- (nonce first), never stored or returned in the clear.
CREATE TABLE account_secrets (
    account_id text NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    name       text NOT NULL,
    sealed     bytea NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (account_id, name)
);
