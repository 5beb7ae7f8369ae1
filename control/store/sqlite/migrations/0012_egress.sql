-- A sandbox's own egress policy ({"egress": ..., "allow": [...]}), within
-- its profile's; '' follows the profile's.
ALTER TABLE sandboxes ADD COLUMN network TEXT NOT NULL DEFAULT '';
-- The egress gateway's decisions, per sandbox, newest read first.
CREATE TABLE egress_log (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    sandbox_id TEXT NOT NULL,
    at INTEGER NOT NULL,
    host TEXT NOT NULL,
    port INTEGER NOT NULL,
    addr TEXT NOT NULL DEFAULT '',
    verdict TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    bytes_up INTEGER NOT NULL DEFAULT 0,
    bytes_down INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX egress_log_sandbox ON egress_log (sandbox_id, id DESC);
-- Credential routes: an account's secrets for upstream APIs, sealed by
-- control, injected by the egress gateway; a sandbox names the ones it
-- may use.
CREATE TABLE credentials (
    account_id TEXT NOT NULL,
    name TEXT NOT NULL,
    upstream TEXT NOT NULL,
    header TEXT NOT NULL,
    sealed BLOB NOT NULL,
    created_at INTEGER NOT NULL,
    last_used_at INTEGER,
    PRIMARY KEY (account_id, name)
);
ALTER TABLE sandboxes ADD COLUMN credentials TEXT NOT NULL DEFAULT '';
