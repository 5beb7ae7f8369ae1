// Package webhook delivers an account's sandbox lifecycle events to the
// URLs it registers: signed with the Standard Webhooks scheme, queued in
// the same transaction as the transition they report, sent through the
// durable job queue with retries for up to a day, in order per sandbox,
// and only to addresses outside the ranges sandbox egress refuses.
package webhook

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/riverqueue/river"

	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/egresspolicy"
)

// Store is what the hub reads and the transactions it writes in.
type Store interface {
	store.Reader
	InTx(ctx context.Context, fn func(store.Tx) error) error
}

// Secrets derives a webhook's signing key (hostkey.Deriver): every
// control replica derives the same key, and none is stored.
type Secrets interface {
	Bytes(info string, n int) ([]byte, error)
}

// DefaultRetry is the wait after each failed attempt: eight attempts in
// all, the last about 23.6 hours after the first.
var DefaultRetry = []time.Duration{5 * time.Second, 5 * time.Minute, 30 * time.Minute,
	2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 6 * time.Hour}

// Config tunes delivery and what a message says.
type Config struct {
	// Trust are ranges the operator opens for receivers inside the
	// refused ranges (a receiver on loopback in sbx dev), as
	// --egress-trust does for sandboxes.
	Trust []netip.Prefix
	// Retry is the wait after each failed attempt (default DefaultRetry);
	// a delivery is given up after the last, or once Window has passed.
	Retry []time.Duration
	// Window bounds a delivery's retries from its first attempt (24 h).
	Window time.Duration
	// AttemptTimeout bounds one attempt, connect to answer (15 s).
	AttemptTimeout time.Duration
	// OrderWait is how long a delivery waits before looking again while
	// an earlier event of its sandbox is still pending for its webhook
	// (1 s).
	OrderWait time.Duration
	// MaxPerAccount bounds an account's webhooks (20).
	MaxPerAccount int
	// SSHHost and SSHPort are the SSH broker's public address, for the
	// reachability of sandbox.ready.
	SSHHost string
	SSHPort int
	// Provider names where sandboxes run ("local", "k8s"); Host the
	// placement host when there is one for the whole deployment.
	Provider, Host string
}

func (c *Config) setDefaults() {
	if len(c.Retry) == 0 {
		c.Retry = DefaultRetry
	}
	if c.Window <= 0 {
		c.Window = 24 * time.Hour
	}
	if c.AttemptTimeout <= 0 {
		c.AttemptTimeout = 15 * time.Second
	}
	if c.OrderWait <= 0 {
		c.OrderWait = time.Second
	}
	if c.MaxPerAccount <= 0 {
		c.MaxPerAccount = 20
	}
}

// Deps are the hub's collaborators.
type Deps struct {
	Store   Store
	Secrets Secrets
	// Resolver and Dialer default to the system's; tests give a dialer
	// that fails the test outside loopback.
	Resolver Resolver
	Dialer   Dialer
	// Own names this host's own server on a port (sbx dev's API, SSH
	// broker, metrics), which a webhook on loopback must never reach,
	// trusted or not; nil: none.
	Own    func(port int) (string, bool)
	Logger *slog.Logger
	Now    func() time.Time
}

// Hub is webhooks' domain: registration, the fan-out of lifecycle events
// into deliveries, and the delivery worker.
type Hub struct {
	cfg      Config
	store    Store
	secrets  Secrets
	resolver Resolver
	dialer   Dialer
	ranges   *egresspolicy.Ranges
	own      func(port int) (string, bool)
	client   *http.Client
	log      *slog.Logger
	now      func() time.Time
}

// New builds a Hub.
func New(cfg Config, d Deps) (*Hub, error) {
	cfg.setDefaults()
	ranges, err := checkedRanges(cfg.Trust)
	if err != nil {
		return nil, fmt.Errorf("webhook trust: %w", err)
	}
	h := &Hub{cfg: cfg, store: d.Store, secrets: d.Secrets, resolver: d.Resolver, dialer: d.Dialer,
		ranges: ranges, own: d.Own, log: d.Logger, now: d.Now}
	if h.resolver == nil {
		h.resolver = net.DefaultResolver
	}
	if h.dialer == nil {
		h.dialer = &net.Dialer{Timeout: cfg.AttemptTimeout}
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.now == nil {
		h.now = time.Now
	}
	h.client = &http.Client{
		Transport: &http.Transport{
			// No proxy from the environment: the checked dial is the
			// only way out.
			Proxy:               nil,
			DialContext:         h.dial,
			TLSHandshakeTimeout: cfg.AttemptTimeout,
			MaxIdleConnsPerHost: 2,
			IdleConnTimeout:     30 * time.Second,
		},
		Timeout: cfg.AttemptTimeout,
		// A redirect is an answer, not a success: following it would
		// send the signed event somewhere the account did not name.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return h, nil
}

// Close drops idle connections to receivers.
func (h *Hub) Close() { h.client.CloseIdleConnections() }

// Errors the API maps to problems.
var (
	ErrNotFound = errors.New("no webhook or delivery with that id in this account")
	ErrLimit    = errors.New("webhook limit reached")
)

// FieldError is a bad field of a registration.
type FieldError struct{ Field, Detail string }

func (e *FieldError) Error() string { return e.Field + ": " + e.Detail }

// Secret is webhook id's signing secret, as shown to the account.
func (h *Hub) Secret(id string) (string, error) {
	key, err := h.key(id)
	if err != nil {
		return "", err
	}
	return EncodeSecret(key), nil
}

func (h *Hub) key(id string) ([]byte, error) {
	key, err := h.secrets.Bytes("sbx webhook signing secret "+id, 32)
	if err != nil {
		return nil, fmt.Errorf("derive secret of webhook %s: %w", id, err)
	}
	return key, nil
}

// Create registers a webhook for the account and returns it with its
// signing secret, which is shown this once.
func (h *Hub) Create(ctx context.Context, accountID, rawURL string, events []string) (store.Webhook, string, error) {
	if err := CheckPatterns(events); err != nil {
		return store.Webhook{}, "", &FieldError{"events", err.Error()}
	}
	u, err := h.checkURL(ctx, rawURL)
	if err != nil {
		var te *TargetError
		if errors.As(err, &te) {
			return store.Webhook{}, "", &FieldError{"url", te.Reason}
		}
		return store.Webhook{}, "", err
	}
	w := store.Webhook{ID: newID("wh_"), AccountID: accountID, URL: u.String(), Events: events, CreatedAt: h.now().UTC()}
	err = h.store.InTx(ctx, func(tx store.Tx) error {
		if err := tx.LockAccount(ctx, accountID); err != nil {
			return err
		}
		have, err := tx.Webhooks(ctx, accountID)
		if err != nil {
			return err
		}
		if len(have) >= h.cfg.MaxPerAccount {
			return fmt.Errorf("%w: an account has at most %d", ErrLimit, h.cfg.MaxPerAccount)
		}
		return tx.InsertWebhook(ctx, w)
	})
	if err != nil {
		return store.Webhook{}, "", fmt.Errorf("create webhook: %w", err)
	}
	secret, err := h.Secret(w.ID)
	return w, secret, err
}

// List lists the account's webhooks.
func (h *Hub) List(ctx context.Context, accountID string) ([]store.Webhook, error) {
	return h.store.Webhooks(ctx, accountID)
}

// owned reads the account's webhook id; another account's is not found.
func (h *Hub) owned(ctx context.Context, accountID, id string) (store.Webhook, error) {
	w, err := h.store.Webhook(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && w.AccountID != accountID) {
		return store.Webhook{}, ErrNotFound
	}
	return w, err
}

// Delete removes the account's webhook and its deliveries; queued
// deliveries find it gone and stop.
func (h *Hub) Delete(ctx context.Context, accountID, id string) error {
	if _, err := h.owned(ctx, accountID, id); err != nil {
		return err
	}
	err := h.store.InTx(ctx, func(tx store.Tx) error { return tx.DeleteWebhook(ctx, id) })
	if errors.Is(err, store.ErrNotFound) {
		return ErrNotFound
	}
	return err
}

// Deliveries lists the account's webhook's deliveries, newest first.
func (h *Hub) Deliveries(ctx context.Context, accountID, id string, limit int) ([]store.WebhookDelivery, error) {
	if _, err := h.owned(ctx, accountID, id); err != nil {
		return nil, err
	}
	return h.store.WebhookDeliveries(ctx, id, limit)
}

// Redeliver sends a delivery again now, whatever its status, with the
// same body and message ID (the receiver can tell it has seen it).
func (h *Hub) Redeliver(ctx context.Context, accountID, webhookID, deliveryID string) (store.WebhookDelivery, error) {
	if _, err := h.owned(ctx, accountID, webhookID); err != nil {
		return store.WebhookDelivery{}, err
	}
	d, err := h.store.WebhookDelivery(ctx, deliveryID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && d.WebhookID != webhookID) {
		return store.WebhookDelivery{}, ErrNotFound
	}
	if err != nil {
		return store.WebhookDelivery{}, err
	}
	now := h.now().UTC()
	err = h.store.InTx(ctx, func(tx store.Tx) error {
		if err := tx.RequeueWebhookDelivery(ctx, deliveryID, now); err != nil {
			return err
		}
		return tx.Enqueue(ctx, DeliverArgs{DeliveryID: deliveryID}, nil)
	})
	if err != nil {
		return store.WebhookDelivery{}, fmt.Errorf("redeliver %s: %w", deliveryID, err)
	}
	d.Status, d.NextRetryAt = store.DeliveryPending, &now
	return d, nil
}

// StateEvent turns a state event into one delivery per matching webhook
// of its account, written and enqueued in tx, the transaction of the
// transition itself: a committed transition is always delivered, a
// rolled back one never. Lifecycle calls it for every event it writes.
func (h *Hub) StateEvent(ctx context.Context, tx store.Tx, ev store.Event) error {
	if ev.Type != "state" {
		return nil
	}
	typ := EventType(ev.State)
	hooks, err := tx.Webhooks(ctx, ev.AccountID)
	if err != nil {
		return err
	}
	var match []store.Webhook
	for _, w := range hooks {
		if Matches(w.Events, typ) {
			match = append(match, w)
		}
	}
	if len(match) == 0 {
		return nil
	}
	if ev.At.IsZero() {
		ev.At = h.now()
	}
	ev.At = ev.At.UTC()
	sb, err := tx.Sandbox(ctx, ev.SandboxID)
	if err != nil {
		return fmt.Errorf("webhook message of %s: %w", ev.SandboxID, err)
	}
	var sessions []store.Session
	if ev.State == store.StateTerminated {
		if sessions, err = tx.Sessions(ctx, sb.ID); err != nil {
			return fmt.Errorf("webhook message of %s: %w", ev.SandboxID, err)
		}
	}
	msgID := newID("msg_")
	body, err := h.message(msgID, ev, sb, sessions)
	if err != nil {
		return fmt.Errorf("webhook message of %s: %w", ev.SandboxID, err)
	}
	for _, w := range match {
		d := store.WebhookDelivery{ID: newID("whd_"), WebhookID: w.ID, MessageID: msgID, EventType: typ,
			SandboxID: sb.ID, Body: body, CreatedAt: ev.At, NextRetryAt: &ev.At}
		if err := tx.InsertWebhookDelivery(ctx, d); err != nil {
			return err
		}
		if err := tx.Enqueue(ctx, DeliverArgs{DeliveryID: d.ID}, nil); err != nil {
			return err
		}
	}
	return nil
}

var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

func newID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return prefix + idEncoding.EncodeToString(b[:])
}

// Worker is the delivery worker to add to the job queue's workers.
func (h *Hub) Worker() river.Worker[DeliverArgs] { return &worker{h: h} }
