-- A sandbox's own egress policy ({"egress": ..., "allow": [...]}), within
-- its profile's; '' follows the profile's.
ALTER TABLE sandboxes ADD COLUMN network text NOT NULL DEFAULT '';
-- The egress gateway's decisions, per sandbox, newest read first.
CREATE TABLE egress_log (
    id bigserial PRIMARY KEY,
    sandbox_id text NOT NULL,
    at timestamptz NOT NULL,
    host text NOT NULL,
    port integer NOT NULL,
    addr text NOT NULL DEFAULT '',
    verdict text NOT NULL,
    reason text NOT NULL DEFAULT '',
    bytes_up bigint NOT NULL DEFAULT 0,
    bytes_down bigint NOT NULL DEFAULT 0
);
CREATE INDEX egress_log_sandbox ON egress_log (sandbox_id, id DESC);
-- Credential routes: an account's secrets for upstream APIs, sealed by
-- control, injected by the egress gateway; a sandbox names the ones it
-- may use.
CREATE TABLE credentials (
    account_id text NOT NULL,
    name text NOT NULL,
    upstream text NOT NULL,
    header text NOT NULL,
    sealed bytea NOT NULL,
    created_at timestamptz NOT NULL,
    last_used_at timestamptz,
    PRIMARY KEY (account_id, name)
);
ALTER TABLE sandboxes ADD COLUMN credentials text NOT NULL DEFAULT '';
