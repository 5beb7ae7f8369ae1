-- The connection log (see the Postgres migration of the same number).
-- Times are Unix microseconds; channels is a JSON array of strings.
CREATE TABLE connections (
    id            TEXT PRIMARY KEY,
    reporter      TEXT NOT NULL,
    sandbox_id    TEXT NOT NULL REFERENCES sandboxes (id),
    account_id    TEXT NOT NULL,
    kind          TEXT NOT NULL,
    credential    TEXT NOT NULL DEFAULT '',
    client_addr   TEXT NOT NULL DEFAULT '',
    client_kind   TEXT NOT NULL DEFAULT '',
    client_detail TEXT NOT NULL DEFAULT '',
    channels      TEXT NOT NULL DEFAULT '[]',
    started_at    INTEGER NOT NULL,
    ended_at      INTEGER,
    lease_until   INTEGER,
    bytes_in      INTEGER NOT NULL DEFAULT 0,
    bytes_out     INTEGER NOT NULL DEFAULT 0,
    end_reason    TEXT NOT NULL DEFAULT ''
) STRICT;
CREATE INDEX connections_sandbox ON connections (sandbox_id, started_at DESC, id DESC);
CREATE INDEX connections_account ON connections (account_id, started_at DESC, id DESC);
CREATE INDEX connections_live ON connections (reporter) WHERE ended_at IS NULL;
CREATE INDEX connections_lease ON connections (lease_until) WHERE ended_at IS NULL;
