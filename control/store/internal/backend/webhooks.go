package backend

import (
	"context"
	"fmt"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

const (
	webhookCols  = `id, account_id, url, events, created_at`
	deliveryCols = `id, webhook_id, message_id, event_type, sandbox_id, body, created_at, status, attempts,
	last_attempt_at, last_status_code, last_duration_ms, last_error, next_retry_at, delivered_at`
)

func (q Queries) scanWebhook(row Row) (store.Webhook, error) {
	var w store.Webhook
	if err := row.Scan(&w.ID, &w.AccountID, &w.URL, q.Dialect.StringsDest(&w.Events), q.Dialect.TimeDest(&w.CreatedAt)); err != nil {
		return store.Webhook{}, err
	}
	w.CreatedAt = w.CreatedAt.UTC()
	return w, nil
}

func (q Queries) scanDelivery(row Row) (store.WebhookDelivery, error) {
	var d store.WebhookDelivery
	var ms int64
	if err := row.Scan(&d.ID, &d.WebhookID, &d.MessageID, &d.EventType, &d.SandboxID, &d.Body,
		q.Dialect.TimeDest(&d.CreatedAt), &d.Status, &d.Attempts, q.Dialect.NullTimeDest(&d.LastAttemptAt),
		&d.LastStatusCode, &ms, &d.LastError, q.Dialect.NullTimeDest(&d.NextRetryAt), q.Dialect.NullTimeDest(&d.DeliveredAt)); err != nil {
		return store.WebhookDelivery{}, err
	}
	d.CreatedAt = d.CreatedAt.UTC()
	d.LastDuration = time.Duration(ms) * time.Millisecond
	for _, t := range []*time.Time{d.LastAttemptAt, d.NextRetryAt, d.DeliveredAt} {
		if t != nil {
			*t = t.UTC()
		}
	}
	return d, nil
}

// Webhooks implements store.Reader.
func (q Queries) Webhooks(ctx context.Context, accountID string) ([]store.Webhook, error) {
	return List(ctx, q.DB, "list webhooks of "+accountID, q.scanWebhook,
		`SELECT `+webhookCols+` FROM webhooks WHERE account_id = $1 ORDER BY created_at, id`, accountID)
}

// Webhook implements store.Reader.
func (q Queries) Webhook(ctx context.Context, id string) (store.Webhook, error) {
	w, err := q.scanWebhook(q.DB.QueryRow(ctx, `SELECT `+webhookCols+` FROM webhooks WHERE id = $1`, id))
	if err != nil {
		return store.Webhook{}, NotFound(err, q.Dialect.NoRows, "webhook "+id)
	}
	return w, nil
}

// WebhookDeliveries implements store.Reader.
func (q Queries) WebhookDeliveries(ctx context.Context, webhookID string, limit int) ([]store.WebhookDelivery, error) {
	return List(ctx, q.DB, "list deliveries of webhook "+webhookID, q.scanDelivery,
		`SELECT `+deliveryCols+` FROM webhook_deliveries WHERE webhook_id = $1
		ORDER BY created_at DESC, id DESC LIMIT $2`, webhookID, Limit(limit))
}

// WebhookDelivery implements store.Reader.
func (q Queries) WebhookDelivery(ctx context.Context, id string) (store.WebhookDelivery, error) {
	d, err := q.scanDelivery(q.DB.QueryRow(ctx, `SELECT `+deliveryCols+` FROM webhook_deliveries WHERE id = $1`, id))
	if err != nil {
		return store.WebhookDelivery{}, NotFound(err, q.Dialect.NoRows, "webhook delivery "+id)
	}
	return d, nil
}

// InsertWebhook implements store.Tx.
func (q Queries) InsertWebhook(ctx context.Context, w store.Webhook) error {
	n, err := q.DB.Exec(ctx, `INSERT INTO webhooks (`+webhookCols+`) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (id) DO NOTHING`,
		w.ID, w.AccountID, w.URL, q.Dialect.Strings(w.Events), q.timeOrNow(w.CreatedAt))
	return OneRow(n, err, "insert webhook "+w.ID, store.ErrConflict)
}

// DeleteWebhook implements store.Tx. The deliveries go first, in the same
// statement order on both backends, rather than by the schema's cascade.
func (q Queries) DeleteWebhook(ctx context.Context, id string) error {
	if _, err := q.DB.Exec(ctx, `DELETE FROM webhook_deliveries WHERE webhook_id = $1`, id); err != nil {
		return fmt.Errorf("delete deliveries of webhook %s: %w", id, err)
	}
	n, err := q.DB.Exec(ctx, `DELETE FROM webhooks WHERE id = $1`, id)
	return OneRow(n, err, "delete webhook "+id, store.ErrNotFound)
}

// InsertWebhookDelivery implements store.Tx.
func (q Queries) InsertWebhookDelivery(ctx context.Context, d store.WebhookDelivery) error {
	n, err := q.DB.Exec(ctx, `INSERT INTO webhook_deliveries (id, webhook_id, message_id, event_type, sandbox_id, body, created_at, status, next_retry_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', $8) ON CONFLICT (id) DO NOTHING`,
		d.ID, d.WebhookID, d.MessageID, d.EventType, d.SandboxID, d.Body, q.timeOrNow(d.CreatedAt), q.Dialect.NullTime(d.NextRetryAt))
	return OneRow(n, err, "insert webhook delivery "+d.ID, store.ErrConflict)
}

// RecordWebhookAttempt implements store.Tx.
func (q Queries) RecordWebhookAttempt(ctx context.Context, id string, a store.WebhookAttempt) error {
	var delivered *time.Time
	if a.Status == store.DeliveryDelivered {
		delivered = &a.At
	}
	n, err := q.DB.Exec(ctx, `UPDATE webhook_deliveries SET attempts = attempts + 1, last_attempt_at = $2,
		last_status_code = $3, last_duration_ms = $4, last_error = $5, status = $6, next_retry_at = $7,
		delivered_at = coalesce($8, delivered_at)
		WHERE id = $1`,
		id, q.timeOrNow(a.At), a.StatusCode, a.Duration.Milliseconds(), a.Error, a.Status,
		q.Dialect.NullTime(a.NextRetryAt), q.Dialect.NullTime(delivered))
	return OneRow(n, err, "record attempt of webhook delivery "+id, store.ErrNotFound)
}

// RequeueWebhookDelivery implements store.Tx.
func (q Queries) RequeueWebhookDelivery(ctx context.Context, id string, at time.Time) error {
	n, err := q.DB.Exec(ctx, `UPDATE webhook_deliveries SET status = 'pending', next_retry_at = $2 WHERE id = $1`,
		id, q.timeOrNow(at))
	return OneRow(n, err, "requeue webhook delivery "+id, store.ErrNotFound)
}

// PendingDeliveryBefore implements store.Reader.
func (q Queries) PendingDeliveryBefore(ctx context.Context, webhookID, sandboxID string, before time.Time) (bool, error) {
	var n int
	err := q.DB.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries
		WHERE webhook_id = $1 AND sandbox_id = $2 AND status = 'pending' AND created_at < $3`,
		webhookID, sandboxID, q.Dialect.Time(before)).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("pending deliveries of %s before %s: %w", sandboxID, before, err)
	}
	return n > 0, nil
}
