package store

import "time"

// Webhook is an account's subscription to its sandboxes' lifecycle
// events. Its signing secret is not stored: control derives it from its
// key and the webhook's ID.
type Webhook struct {
	ID        string
	AccountID string
	URL       string
	// Events are the event type patterns it receives ("sandbox.*",
	// "sandbox.ready").
	Events    []string
	CreatedAt time.Time
}

// Delivery statuses.
const (
	DeliveryPending   = "pending"
	DeliveryDelivered = "delivered"
	DeliveryFailed    = "failed"
)

// WebhookDelivery is one event sent (or being sent) to one webhook, with
// what its last attempt saw.
type WebhookDelivery struct {
	ID        string
	WebhookID string
	// MessageID is the event's ID, sent as webhook-id: the same on every
	// attempt and redelivery, so a receiver can drop duplicates.
	MessageID string
	EventType string
	SandboxID string
	// Body is the exact JSON sent.
	Body      []byte
	CreatedAt time.Time
	Status    string // DeliveryPending, DeliveryDelivered or DeliveryFailed
	Attempts  int
	// LastAttemptAt, LastStatusCode (0: no answer), LastDuration and
	// LastError describe the latest attempt.
	LastAttemptAt  *time.Time
	LastStatusCode int
	LastDuration   time.Duration
	LastError      string
	// NextRetryAt is when a pending delivery is tried again; nil when
	// none is planned.
	NextRetryAt *time.Time
	DeliveredAt *time.Time
}

// WebhookAttempt is the outcome of one attempt at a delivery.
type WebhookAttempt struct {
	At         time.Time
	StatusCode int // 0: no HTTP answer
	Duration   time.Duration
	Error      string
	// Status is the delivery's status after it.
	Status      string
	NextRetryAt *time.Time
}
