// Package redistickets records redeemed preview login tickets in Redis, so
// a ticket is good exactly once across every edge replica.
package redistickets

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Store is a preview.Tickets on Redis.
type Store struct {
	rdb    redis.UniversalClient
	prefix string
}

// New stores redeemed ticket nonces under prefix in rdb.
func New(rdb redis.UniversalClient, prefix string) *Store {
	return &Store{rdb: rdb, prefix: prefix}
}

// Redeem sets the nonce's key only if absent (SET NX), with the ticket's
// remaining life as expiry: Redis decides which of any number of
// concurrent redemptions, on any replica, is the first.
func (s *Store) Redeem(ctx context.Context, nonce string, ttl time.Duration) (bool, error) {
	ok, err := s.rdb.SetNX(ctx, s.prefix+nonce, 1, ttl).Result()
	if err != nil {
		return false, fmt.Errorf("redeem preview ticket: %w", err)
	}
	return ok, nil
}
