CREATE TABLE accounts (
    id                text PRIMARY KEY,
    name              text NOT NULL UNIQUE,
    sandboxes_enabled boolean NOT NULL DEFAULT true,
    concurrent_limit  integer NOT NULL DEFAULT 1,
    allowed_platforms text[] NOT NULL DEFAULT '{}',
    monthly_minutes   integer NOT NULL DEFAULT 0,
    created_at        timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE projects (
    id         text PRIMARY KEY,
    account_id text NOT NULL REFERENCES accounts (id),
    name       text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (account_id, name)
);

CREATE TABLE tokens (
    id         text PRIMARY KEY,
    account_id text NOT NULL REFERENCES accounts (id),
    kind       text NOT NULL,
    name       text NOT NULL DEFAULT '',
    hash       bytea NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz,
    revoked_at timestamptz
);
CREATE INDEX tokens_account_id ON tokens (account_id);

CREATE TABLE profiles (
    name      text PRIMARY KEY,
    platform  text NOT NULL,
    cpu       double precision NOT NULL,
    memory_mb integer NOT NULL,
    disk_gb   integer NOT NULL,
    image     text NOT NULL DEFAULT ''
);

CREATE TABLE sandboxes (
    id              text PRIMARY KEY,
    account_id      text NOT NULL REFERENCES accounts (id),
    project_id      text NOT NULL DEFAULT '',
    profile         text NOT NULL,
    platform        text NOT NULL,
    state           text NOT NULL,
    created_at      timestamptz NOT NULL,
    deadline_at     timestamptz NOT NULL,
    ready_at        timestamptz,
    suspended_at    timestamptz,
    terminated_at   timestamptz,
    end_reason      text NOT NULL DEFAULT '',
    endpoint        text NOT NULL DEFAULT '',
    ssh_user        text NOT NULL DEFAULT '',
    workspace       text NOT NULL DEFAULT '',
    host_key        text NOT NULL DEFAULT '',
    grants          jsonb NOT NULL DEFAULT '[]',
    idempotency_key text NOT NULL DEFAULT '',
    request_hash    text NOT NULL DEFAULT ''
);
-- A retried POST /sandboxes with the same key must find the first one.
CREATE UNIQUE INDEX sandboxes_idempotency ON sandboxes (account_id, idempotency_key)
    WHERE idempotency_key <> '';
CREATE INDEX sandboxes_account_created ON sandboxes (account_id, created_at DESC, id DESC);
CREATE INDEX sandboxes_state ON sandboxes (state);
CREATE INDEX sandboxes_deadline ON sandboxes (deadline_at);

-- The billing ledger. Rows are appended open and closed exactly once.
CREATE TABLE sandbox_sessions (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sandbox_id text NOT NULL REFERENCES sandboxes (id),
    account_id text NOT NULL,
    platform   text NOT NULL,
    kind       text NOT NULL CHECK (kind IN ('compute', 'storage')),
    started_at timestamptz NOT NULL,
    ended_at   timestamptz,
    end_reason text NOT NULL DEFAULT ''
);
-- The database's own guarantee against doubled billing intervals: at most
-- one open session per sandbox and kind, whatever the application does.
CREATE UNIQUE INDEX sandbox_sessions_one_open ON sandbox_sessions (sandbox_id, kind)
    WHERE ended_at IS NULL;
CREATE INDEX sandbox_sessions_account ON sandbox_sessions (account_id, started_at);

-- Only closing an open session is allowed; history is never rewritten.
CREATE FUNCTION sandbox_sessions_append_only() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'sandbox_sessions is append-only';
    END IF;
    IF OLD.ended_at IS NOT NULL
        OR NEW.id <> OLD.id OR NEW.sandbox_id <> OLD.sandbox_id
        OR NEW.account_id <> OLD.account_id OR NEW.platform <> OLD.platform
        OR NEW.kind <> OLD.kind OR NEW.started_at <> OLD.started_at THEN
        RAISE EXCEPTION 'sandbox_sessions is append-only';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER sandbox_sessions_append_only BEFORE UPDATE OR DELETE ON sandbox_sessions
    FOR EACH ROW EXECUTE FUNCTION sandbox_sessions_append_only();

CREATE TABLE events (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sandbox_id text NOT NULL,
    account_id text NOT NULL,
    type       text NOT NULL,
    state      text NOT NULL DEFAULT '',
    reason     text NOT NULL DEFAULT '',
    actor      text NOT NULL DEFAULT '',
    message    text NOT NULL DEFAULT '',
    at         timestamptz NOT NULL
);
CREATE INDEX events_sandbox ON events (sandbox_id, id);
