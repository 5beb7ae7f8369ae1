package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

func testWebhooks(t *testing.T, ctx context.Context, s store.Store) {
	w1 := store.Webhook{ID: "wh-1", AccountID: "a", URL: "https://hooks.example/a", Events: []string{"sandbox.*"}, CreatedAt: t0}
	w2 := store.Webhook{ID: "wh-2", AccountID: "a", URL: "https://hooks.example/b", Events: []string{"sandbox.ready", "sandbox.terminated"}, CreatedAt: t0.Add(time.Second)}
	wb := store.Webhook{ID: "wh-b", AccountID: "b", URL: "https://hooks.example/c", Events: []string{"*"}, CreatedAt: t0}
	inTx(t, s, func(tx store.Tx) error {
		return all(ctx, tx,
			func(ctx context.Context, tx store.Tx) error { return tx.InsertWebhook(ctx, w2) },
			func(ctx context.Context, tx store.Tx) error { return tx.InsertWebhook(ctx, w1) },
			func(ctx context.Context, tx store.Tx) error { return tx.InsertWebhook(ctx, wb) })
	})
	wantRead(t, "account a's webhooks, oldest first", []store.Webhook{w1, w2})(s.Webhooks(ctx, "a"))
	wantRead(t, "webhook by id", w2)(s.Webhook(ctx, "wh-2"))
	_, err := s.Webhook(ctx, "wh-none")
	wantErr(t, "Webhook(missing)", err, store.ErrNotFound)
	err = s.InTx(ctx, func(tx store.Tx) error { return tx.InsertWebhook(ctx, w1) })
	wantErr(t, "second webhook with the same id", err, store.ErrConflict)

	d1 := store.WebhookDelivery{ID: "whd-1", WebhookID: "wh-1", MessageID: "msg_1", EventType: "sandbox.pending",
		SandboxID: "sb-1", Body: []byte(`{"type":"sandbox.pending"}`), CreatedAt: t0, Status: store.DeliveryPending, NextRetryAt: ptr(t0)}
	d2 := store.WebhookDelivery{ID: "whd-2", WebhookID: "wh-1", MessageID: "msg_2", EventType: "sandbox.ready",
		SandboxID: "sb-1", Body: []byte(`{"type":"sandbox.ready"}`), CreatedAt: t0.Add(time.Second), Status: store.DeliveryPending}
	d3 := store.WebhookDelivery{ID: "whd-3", WebhookID: "wh-2", MessageID: "msg_2", EventType: "sandbox.ready",
		SandboxID: "sb-1", Body: []byte(`{"type":"sandbox.ready"}`), CreatedAt: t0.Add(time.Second), Status: store.DeliveryPending}
	inTx(t, s, func(tx store.Tx) error {
		return all(ctx, tx,
			func(ctx context.Context, tx store.Tx) error { return tx.InsertWebhookDelivery(ctx, d1) },
			func(ctx context.Context, tx store.Tx) error { return tx.InsertWebhookDelivery(ctx, d2) },
			func(ctx context.Context, tx store.Tx) error { return tx.InsertWebhookDelivery(ctx, d3) })
	})
	wantRead(t, "wh-1's deliveries, newest first", []store.WebhookDelivery{d2, d1})(s.WebhookDeliveries(ctx, "wh-1", 0))
	wantRead(t, "a page of one", []store.WebhookDelivery{d2})(s.WebhookDeliveries(ctx, "wh-1", 1))

	// Order: d2 waits while d1, its sandbox's earlier event, is pending.
	for _, c := range []struct {
		webhook, sandbox string
		before           time.Time
		want             bool
	}{
		{"wh-1", "sb-1", d2.CreatedAt, true},
		{"wh-1", "sb-1", d1.CreatedAt, false},
		{"wh-1", "sb-2", d2.CreatedAt, false},
		{"wh-2", "sb-1", d3.CreatedAt, false},
	} {
		got, err := s.PendingDeliveryBefore(ctx, c.webhook, c.sandbox, c.before)
		if err != nil || got != c.want {
			t.Errorf("PendingDeliveryBefore(%s, %s, %v) = %v, %v; want %v", c.webhook, c.sandbox, c.before, got, err, c.want)
		}
	}

	// A failed attempt, then a successful one: attempts count, the last
	// one's outcome is what the row says.
	retry := t0.Add(time.Minute)
	inTx(t, s, func(tx store.Tx) error {
		return tx.RecordWebhookAttempt(ctx, "whd-1", store.WebhookAttempt{At: t0.Add(time.Second), StatusCode: 503,
			Duration: 40 * time.Millisecond, Error: "HTTP 503", Status: store.DeliveryPending, NextRetryAt: &retry})
	})
	failed := d1
	failed.Attempts, failed.LastAttemptAt, failed.LastStatusCode = 1, ptr(t0.Add(time.Second)), 503
	failed.LastDuration, failed.LastError, failed.NextRetryAt = 40*time.Millisecond, "HTTP 503", &retry
	wantRead(t, "after a failed attempt", failed)(s.WebhookDelivery(ctx, "whd-1"))

	inTx(t, s, func(tx store.Tx) error {
		return tx.RecordWebhookAttempt(ctx, "whd-1", store.WebhookAttempt{At: retry, StatusCode: 204,
			Duration: 7 * time.Millisecond, Status: store.DeliveryDelivered})
	})
	ok := failed
	ok.Attempts, ok.LastAttemptAt, ok.LastStatusCode, ok.LastDuration = 2, &retry, 204, 7*time.Millisecond
	ok.LastError, ok.Status, ok.NextRetryAt, ok.DeliveredAt = "", store.DeliveryDelivered, nil, &retry
	wantRead(t, "after a delivered attempt", ok)(s.WebhookDelivery(ctx, "whd-1"))
	if got, err := s.PendingDeliveryBefore(ctx, "wh-1", "sb-1", d2.CreatedAt); err != nil || got {
		t.Errorf("PendingDeliveryBefore after d1 was delivered = %v, %v; want false", got, err)
	}

	again := retry.Add(time.Hour)
	inTx(t, s, func(tx store.Tx) error { return tx.RequeueWebhookDelivery(ctx, "whd-1", again) })
	requeued := ok
	requeued.Status, requeued.NextRetryAt = store.DeliveryPending, &again
	wantRead(t, "requeued for a redelivery", requeued)(s.WebhookDelivery(ctx, "whd-1"))

	err = s.InTx(ctx, func(tx store.Tx) error {
		return tx.RecordWebhookAttempt(ctx, "whd-none", store.WebhookAttempt{Status: store.DeliveryFailed})
	})
	wantErr(t, "RecordWebhookAttempt(missing)", err, store.ErrNotFound)
	err = s.InTx(ctx, func(tx store.Tx) error { return tx.RequeueWebhookDelivery(ctx, "whd-none", t0) })
	wantErr(t, "RequeueWebhookDelivery(missing)", err, store.ErrNotFound)

	// Deleting a webhook takes its deliveries and no other's.
	inTx(t, s, func(tx store.Tx) error { return tx.DeleteWebhook(ctx, "wh-1") })
	_, err = s.WebhookDelivery(ctx, "whd-1")
	wantErr(t, "a deleted webhook's delivery", err, store.ErrNotFound)
	wantRead(t, "the other webhook's delivery", d3)(s.WebhookDelivery(ctx, "whd-3"))
	wantRead(t, "account a's webhooks after the delete", []store.Webhook{w2})(s.Webhooks(ctx, "a"))
	err = s.InTx(ctx, func(tx store.Tx) error { return tx.DeleteWebhook(ctx, "wh-1") })
	wantErr(t, "DeleteWebhook(again)", err, store.ErrNotFound)
}
