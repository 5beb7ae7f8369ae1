-- The connection log: one row per SSH connection, preview session,
-- terminal, exec stream and MCP session (issue 31). A live row (ended_at
-- NULL) carries a lease its reporter (an edge or control replica) renews
-- with every batch; a row whose lease ran out is ended as edge_lost.
-- credential names a token, SSH credential or OIDC subject, never a
-- secret.
CREATE TABLE connections (
    id            text PRIMARY KEY,
    reporter      text NOT NULL,
    sandbox_id    text NOT NULL REFERENCES sandboxes (id),
    account_id    text NOT NULL,
    kind          text NOT NULL,
    credential    text NOT NULL DEFAULT '',
    client_addr   text NOT NULL DEFAULT '',
    client_kind   text NOT NULL DEFAULT '',
    client_detail text NOT NULL DEFAULT '',
    channels      text[] NOT NULL DEFAULT '{}',
    started_at    timestamptz NOT NULL,
    ended_at      timestamptz,
    lease_until   timestamptz,
    bytes_in      bigint NOT NULL DEFAULT 0,
    bytes_out     bigint NOT NULL DEFAULT 0,
    end_reason    text NOT NULL DEFAULT ''
);
CREATE INDEX connections_sandbox ON connections (sandbox_id, started_at DESC, id DESC);
CREATE INDEX connections_account ON connections (account_id, started_at DESC, id DESC);
CREATE INDEX connections_live ON connections (reporter) WHERE ended_at IS NULL;
CREATE INDEX connections_lease ON connections (lease_until) WHERE ended_at IS NULL;
