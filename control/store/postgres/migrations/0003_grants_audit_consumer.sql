-- Who a sandbox is for (actor, project, session_id, run_id); copied onto
-- each of its events.
ALTER TABLE sandboxes ADD COLUMN consumer jsonb NOT NULL DEFAULT '{}';
ALTER TABLE events ADD COLUMN consumer jsonb NOT NULL DEFAULT '{}';

-- One row per grant of a sandbox. The token is minted at provisioning and
-- only its SHA-256 is kept. There is no expiry column on purpose: a token
-- is valid while its sandbox is live and before the sandbox's deadline, so
-- it follows deadline extensions and dies with the sandbox.
CREATE TABLE grant_tokens (
    id         text PRIMARY KEY,
    sandbox_id text NOT NULL REFERENCES sandboxes (id),
    account_id text NOT NULL REFERENCES accounts (id),
    project_id text NOT NULL REFERENCES projects (id),
    position   integer NOT NULL,
    scopes     text[] NOT NULL,
    hash       bytea UNIQUE,
    created_at timestamptz NOT NULL,
    minted_at  timestamptz,
    UNIQUE (sandbox_id, position)
);

-- Access decisions surfaced to project owners. Append-only.
CREATE TABLE audit_log (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    account_id text NOT NULL,
    project_id text NOT NULL DEFAULT '',
    sandbox_id text NOT NULL DEFAULT '',
    caller     text NOT NULL DEFAULT '',
    action     text NOT NULL,
    scopes     text[] NOT NULL DEFAULT '{}',
    message    text NOT NULL,
    at         timestamptz NOT NULL
);
CREATE INDEX audit_log_account ON audit_log (account_id, id);
CREATE INDEX audit_log_project ON audit_log (project_id, id);

CREATE FUNCTION audit_log_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'audit_log is append-only';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_append_only();
