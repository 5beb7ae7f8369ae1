package preview

import (
	"context"
	"time"
)

// Tickets records redeemed one-time login tickets. Every replica of the
// edge must share one, or a ticket (which lives ticketTTL and travels in
// a URL) could be replayed on another replica.
type Tickets interface {
	// Redeem atomically marks nonce used for ttl and reports whether this
	// call was the first to do so. An error means "unknown": the caller
	// refuses the ticket.
	Redeem(ctx context.Context, nonce string, ttl time.Duration) (bool, error)
}
