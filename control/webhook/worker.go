package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/riverqueue/river"

	"github.com/sbxedge/sbx/control/store"
)

// DeliverArgs asks for one delivery to be attempted.
type DeliverArgs struct {
	DeliveryID string `json:"delivery_id"`
}

// Kind implements river.JobArgs.
func (DeliverArgs) Kind() string { return "webhook.deliver" }

// maxAttempts is River's cap; the hub's own schedule (Config.Retry and
// Window) decides first, and cancels the job when it gives up.
const maxAttempts = 100

// InsertOpts implements river.JobInsertOpts.
func (DeliverArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{MaxAttempts: maxAttempts} }

type worker struct {
	river.WorkerDefaults[DeliverArgs]
	h *Hub
}

// NextRetry follows the hub's schedule rather than the queue's.
func (w *worker) NextRetry(job *river.Job[DeliverArgs]) time.Time {
	return time.Now().Add(w.h.retryDelay(job.Attempt))
}

// Timeout leaves the attempt its own timeout and the store its writes.
func (w *worker) Timeout(*river.Job[DeliverArgs]) time.Duration {
	return w.h.cfg.AttemptTimeout + 30*time.Second
}

// retryDelay is the wait after failed attempt n (1-based).
func (h *Hub) retryDelay(n int) time.Duration {
	return h.cfg.Retry[min(max(n, 1), len(h.cfg.Retry))-1]
}

// Work makes one attempt and records it. It returns an error to have
// River retry on the hub's schedule, and cancels the job when the
// delivery is settled, gone, or given up.
func (w *worker) Work(ctx context.Context, job *river.Job[DeliverArgs]) error {
	h := w.h
	d, err := h.store.WebhookDelivery(ctx, job.Args.DeliveryID)
	if errors.Is(err, store.ErrNotFound) {
		return river.JobCancel(fmt.Errorf("delivery %s is gone (webhook deleted)", job.Args.DeliveryID))
	}
	if err != nil {
		return err
	}
	if d.Status != store.DeliveryPending {
		return nil
	}
	earlier, err := h.store.PendingDeliveryBefore(ctx, d.WebhookID, d.SandboxID, d.CreatedAt)
	if err != nil {
		return err
	}
	// An earlier delivery settles within Window (delivered or given up);
	// past it, one stuck pending (its job lost) no longer holds the rest.
	if earlier && h.now().Sub(d.CreatedAt) < h.cfg.Window {
		return river.JobSnooze(h.cfg.OrderWait)
	}
	hook, err := h.store.Webhook(ctx, d.WebhookID)
	if errors.Is(err, store.ErrNotFound) {
		return river.JobCancel(fmt.Errorf("webhook %s is gone", d.WebhookID))
	}
	if err != nil {
		return err
	}
	start := h.now()
	code, sendErr := h.send(ctx, hook, d, start)
	a := store.WebhookAttempt{At: start.UTC(), StatusCode: code, Duration: h.now().Sub(start), Status: store.DeliveryDelivered}
	var next time.Time
	if sendErr != nil {
		a.Error = sendErr.Error()
		next = start.Add(h.retryDelay(job.Attempt))
		if job.Attempt > len(h.cfg.Retry) || job.Attempt >= job.MaxAttempts || next.Sub(job.CreatedAt) > h.cfg.Window {
			a.Status = store.DeliveryFailed
		} else {
			a.Status, a.NextRetryAt = store.DeliveryPending, &next
		}
	}
	err = h.store.InTx(ctx, func(tx store.Tx) error { return tx.RecordWebhookAttempt(ctx, d.ID, a) })
	if errors.Is(err, store.ErrNotFound) {
		return river.JobCancel(fmt.Errorf("delivery %s is gone (webhook deleted)", d.ID))
	}
	if err != nil {
		return errors.Join(sendErr, err)
	}
	switch a.Status {
	case store.DeliveryPending:
		h.log.InfoContext(ctx, "webhook delivery failed; will retry", "webhook_id", d.WebhookID,
			"delivery_id", d.ID, "attempt", job.Attempt, "next_retry_at", next, "err", sendErr)
		return sendErr
	case store.DeliveryFailed:
		h.log.WarnContext(ctx, "webhook delivery given up", "webhook_id", d.WebhookID,
			"delivery_id", d.ID, "attempt", job.Attempt, "err", sendErr)
		return river.JobCancel(sendErr)
	}
	return nil
}

// maxAnswer is how much of a receiver's answer is read (and dropped), so
// the connection can be reused without a receiver making us read forever.
const maxAnswer = 64 << 10

// send POSTs the delivery's body, signed now, and returns the answer's
// status (0 for none) and an error unless it was 2xx.
func (h *Hub) send(ctx context.Context, hook store.Webhook, d store.WebhookDelivery, at time.Time) (int, error) {
	key, err := h.key(hook.ID)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, h.cfg.AttemptTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hook.URL, bytes.NewReader(d.Body))
	if err != nil {
		return 0, fmt.Errorf("request to webhook: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "sbx-webhooks/1")
	req.Header.Set(HeaderID, d.MessageID)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(at.Unix(), 10))
	req.Header.Set(HeaderSignature, Sign(key, d.MessageID, at, d.Body))
	resp, err := h.client.Do(req)
	if err != nil {
		// url.Error's message quotes the URL, whose query may hold the
		// receiver's own token: the log and delivery log get the cause.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return 0, fmt.Errorf("post: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswer))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, fmt.Errorf("receiver answered %s", resp.Status)
	}
	return resp.StatusCode, nil
}
