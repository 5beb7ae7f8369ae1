-- Times are INTEGER unix microseconds (UTC); booleans are 0/1; lists are
-- JSON text. STRICT makes SQLite refuse values of the wrong type.

CREATE TABLE accounts (
    id                TEXT PRIMARY KEY,
    name              TEXT NOT NULL UNIQUE,
    sandboxes_enabled INTEGER NOT NULL DEFAULT 1,
    concurrent_limit  INTEGER NOT NULL DEFAULT 1,
    allowed_platforms TEXT NOT NULL DEFAULT '[]',
    monthly_minutes   INTEGER NOT NULL DEFAULT 0,
    created_at        INTEGER NOT NULL
) STRICT;

CREATE TABLE projects (
    id         TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id),
    name       TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    UNIQUE (account_id, name)
) STRICT;

CREATE TABLE tokens (
    id         TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id),
    kind       TEXT NOT NULL,
    name       TEXT NOT NULL DEFAULT '',
    hash       BLOB NOT NULL UNIQUE,
    created_at INTEGER NOT NULL,
    expires_at INTEGER,
    revoked_at INTEGER
) STRICT;
CREATE INDEX tokens_account_id ON tokens (account_id);

CREATE TABLE profiles (
    name      TEXT PRIMARY KEY,
    platform  TEXT NOT NULL,
    cpu       REAL NOT NULL,
    memory_mb INTEGER NOT NULL,
    disk_gb   INTEGER NOT NULL,
    image     TEXT NOT NULL DEFAULT ''
) STRICT;

CREATE TABLE sandboxes (
    id              TEXT PRIMARY KEY,
    account_id      TEXT NOT NULL REFERENCES accounts (id),
    project_id      TEXT NOT NULL DEFAULT '',
    profile         TEXT NOT NULL,
    platform        TEXT NOT NULL,
    state           TEXT NOT NULL,
    created_at      INTEGER NOT NULL,
    deadline_at     INTEGER NOT NULL,
    ready_at        INTEGER,
    suspended_at    INTEGER,
    terminated_at   INTEGER,
    end_reason      TEXT NOT NULL DEFAULT '',
    endpoint        TEXT NOT NULL DEFAULT '',
    ssh_user        TEXT NOT NULL DEFAULT '',
    workspace       TEXT NOT NULL DEFAULT '',
    host_key        TEXT NOT NULL DEFAULT '',
    grants          TEXT NOT NULL DEFAULT '[]',
    idempotency_key TEXT NOT NULL DEFAULT '',
    request_hash    TEXT NOT NULL DEFAULT ''
) STRICT;
-- A retried POST /sandboxes with the same key must find the first one.
CREATE UNIQUE INDEX sandboxes_idempotency ON sandboxes (account_id, idempotency_key)
    WHERE idempotency_key <> '';
CREATE INDEX sandboxes_account_created ON sandboxes (account_id, created_at DESC, id DESC);
CREATE INDEX sandboxes_state ON sandboxes (state);
CREATE INDEX sandboxes_deadline ON sandboxes (deadline_at);

-- The billing ledger. Rows are appended open and closed exactly once.
-- AUTOINCREMENT: ids are never reused, even after the newest row is gone.
CREATE TABLE sandbox_sessions (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    sandbox_id TEXT NOT NULL REFERENCES sandboxes (id),
    account_id TEXT NOT NULL,
    platform   TEXT NOT NULL,
    kind       TEXT NOT NULL CHECK (kind IN ('compute', 'storage')),
    started_at INTEGER NOT NULL,
    ended_at   INTEGER,
    end_reason TEXT NOT NULL DEFAULT ''
) STRICT;
-- The database's own guarantee against doubled billing intervals: at most
-- one open session per sandbox and kind, whatever the application does.
CREATE UNIQUE INDEX sandbox_sessions_one_open ON sandbox_sessions (sandbox_id, kind)
    WHERE ended_at IS NULL;
CREATE INDEX sandbox_sessions_account ON sandbox_sessions (account_id, started_at);

-- Only closing an open session is allowed; history is never rewritten.
CREATE TRIGGER sandbox_sessions_no_delete BEFORE DELETE ON sandbox_sessions
BEGIN
    SELECT RAISE(ABORT, 'sandbox_sessions is append-only');
END;
CREATE TRIGGER sandbox_sessions_close_once BEFORE UPDATE ON sandbox_sessions
WHEN OLD.ended_at IS NOT NULL
    OR NEW.id IS NOT OLD.id OR NEW.sandbox_id IS NOT OLD.sandbox_id
    OR NEW.account_id IS NOT OLD.account_id OR NEW.platform IS NOT OLD.platform
    OR NEW.kind IS NOT OLD.kind OR NEW.started_at IS NOT OLD.started_at
BEGIN
    SELECT RAISE(ABORT, 'sandbox_sessions is append-only');
END;

CREATE TABLE events (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    sandbox_id TEXT NOT NULL,
    account_id TEXT NOT NULL,
    type       TEXT NOT NULL,
    state      TEXT NOT NULL DEFAULT '',
    reason     TEXT NOT NULL DEFAULT '',
    actor      TEXT NOT NULL DEFAULT '',
    message    TEXT NOT NULL DEFAULT '',
    at         INTEGER NOT NULL
) STRICT;
CREATE INDEX events_sandbox ON events (sandbox_id, id);
