-- Webhooks an account registers (POST /webhooks) and the deliveries of
-- its sandboxes' lifecycle events to them. No secret is stored: a
-- webhook's signing secret is derived from control's key and its ID.
-- A delivery keeps the exact body it sends, so every retry and
-- redelivery carries the same bytes under the same message ID.
CREATE TABLE webhooks (
    id         text PRIMARY KEY,
    account_id text NOT NULL REFERENCES accounts (id),
    url        text NOT NULL,
    events     text[] NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhooks_account ON webhooks (account_id, created_at);

CREATE TABLE webhook_deliveries (
    id               text PRIMARY KEY,
    webhook_id       text NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    message_id       text NOT NULL,
    event_type       text NOT NULL,
    sandbox_id       text NOT NULL,
    body             bytea NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    status           text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts         integer NOT NULL DEFAULT 0,
    last_attempt_at  timestamptz,
    last_status_code integer NOT NULL DEFAULT 0,
    last_duration_ms bigint NOT NULL DEFAULT 0,
    last_error       text NOT NULL DEFAULT '',
    next_retry_at    timestamptz,
    delivered_at     timestamptz
);
CREATE INDEX webhook_deliveries_webhook ON webhook_deliveries (webhook_id, created_at);
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (webhook_id, sandbox_id, created_at) WHERE status = 'pending';
