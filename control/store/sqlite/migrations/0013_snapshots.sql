-- Snapshots: point-in-time copies of a sandbox's workspace that belong to
-- the account, not the sandbox (they outlive it). A ready snapshot has one
-- open storage line in sandbox_sessions, told apart from the sandbox's own
-- lines by snapshot_id, so the one-open-line guarantee becomes per
-- (sandbox, kind, snapshot).
CREATE TABLE snapshots (
    id         TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id),
    sandbox_id TEXT NOT NULL REFERENCES sandboxes (id),
    platform   TEXT NOT NULL,
    profile    TEXT NOT NULL,
    name       TEXT NOT NULL DEFAULT '',
    labels     TEXT NOT NULL DEFAULT '{}',
    state      TEXT NOT NULL CHECK (state IN ('creating', 'ready', 'failed', 'deleted')),
    reason     TEXT NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL,
    ready_at   INTEGER,
    deleted_at INTEGER
) STRICT;
CREATE INDEX snapshots_account ON snapshots (account_id, created_at);
CREATE INDEX snapshots_sandbox ON snapshots (sandbox_id, created_at);

ALTER TABLE sandbox_sessions ADD COLUMN snapshot_id TEXT NOT NULL DEFAULT '';
DROP INDEX sandbox_sessions_one_open;
CREATE UNIQUE INDEX sandbox_sessions_one_open ON sandbox_sessions (sandbox_id, kind, snapshot_id)
    WHERE ended_at IS NULL;

-- from_snapshot: the snapshot a fork's workspace started as.
-- restore_snapshot: the snapshot an in-place restore under way brings back.
-- recreated_from / recreated_as link a recreate's old and new sandbox;
-- create_request is the create as it was asked (no repository token),
-- what a recreate provisions again.
ALTER TABLE sandboxes ADD COLUMN from_snapshot TEXT NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN restore_snapshot TEXT NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN recreated_from TEXT NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN recreated_as TEXT NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN create_request TEXT NOT NULL DEFAULT '{}';
