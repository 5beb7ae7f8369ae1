-- Who a sandbox is for (actor, project, session_id, run_id); copied onto
-- each of its events. JSON text.
ALTER TABLE sandboxes ADD COLUMN consumer TEXT NOT NULL DEFAULT '{}';
ALTER TABLE events ADD COLUMN consumer TEXT NOT NULL DEFAULT '{}';

-- One row per grant of a sandbox; see the Postgres migration for why there
-- is no expiry column. scopes is a JSON array.
CREATE TABLE grant_tokens (
    id         TEXT PRIMARY KEY,
    sandbox_id TEXT NOT NULL REFERENCES sandboxes (id),
    account_id TEXT NOT NULL REFERENCES accounts (id),
    project_id TEXT NOT NULL REFERENCES projects (id),
    position   INTEGER NOT NULL,
    scopes     TEXT NOT NULL,
    hash       BLOB UNIQUE,
    created_at INTEGER NOT NULL,
    minted_at  INTEGER,
    UNIQUE (sandbox_id, position)
) STRICT;

-- Access decisions surfaced to project owners. Append-only.
CREATE TABLE audit_log (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    account_id TEXT NOT NULL,
    project_id TEXT NOT NULL DEFAULT '',
    sandbox_id TEXT NOT NULL DEFAULT '',
    caller     TEXT NOT NULL DEFAULT '',
    action     TEXT NOT NULL,
    scopes     TEXT NOT NULL DEFAULT '[]',
    message    TEXT NOT NULL,
    at         INTEGER NOT NULL
) STRICT;
CREATE INDEX audit_log_account ON audit_log (account_id, id);
CREATE INDEX audit_log_project ON audit_log (project_id, id);
CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'audit_log is append-only');
END;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'audit_log is append-only');
END;
