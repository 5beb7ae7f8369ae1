-- Webhooks an account registers (POST /webhooks) and the deliveries of
-- its sandboxes' lifecycle events to them. No secret is stored: a
-- webhook's signing secret is derived from control's key and its ID.
-- A delivery keeps the exact body it sends, so every retry and
-- redelivery carries the same bytes under the same message ID.
CREATE TABLE webhooks (
    id         TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id),
    url        TEXT NOT NULL,
    events     TEXT NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;
CREATE INDEX webhooks_account ON webhooks (account_id, created_at);

CREATE TABLE webhook_deliveries (
    id               TEXT PRIMARY KEY,
    webhook_id       TEXT NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    message_id       TEXT NOT NULL,
    event_type       TEXT NOT NULL,
    sandbox_id       TEXT NOT NULL,
    body             BLOB NOT NULL,
    created_at       INTEGER NOT NULL,
    status           TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    last_attempt_at  INTEGER,
    last_status_code INTEGER NOT NULL DEFAULT 0,
    last_duration_ms INTEGER NOT NULL DEFAULT 0,
    last_error       TEXT NOT NULL DEFAULT '',
    next_retry_at    INTEGER,
    delivered_at     INTEGER
) STRICT;
CREATE INDEX webhook_deliveries_webhook ON webhook_deliveries (webhook_id, created_at);
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (webhook_id, sandbox_id, created_at) WHERE status = 'pending';
