package control

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sbxedge/sbx/control/api"
)

// redisTickets records redeemed terminal stream tickets in the shared
// Redis, so a ticket is good once across every control replica.
type redisTickets struct{ rdb *redis.Client }

// Redeem sets the nonce's key only if absent (SET NX) for the ticket's
// remaining life: Redis decides which redemption is the first.
func (t redisTickets) Redeem(ctx context.Context, nonce string, ttl time.Duration) (bool, error) {
	ok, err := t.rdb.SetNX(ctx, "sbx:stream-ticket:"+nonce, 1, ttl).Result()
	if err != nil {
		return false, fmt.Errorf("redeem stream ticket: %w", err)
	}
	return ok, nil
}

// streamTickets is Redis when control has one, else nil: the API keeps
// them in process, which is right for the one process of sbx dev.
func streamTickets(rdb *redis.Client) api.Tickets {
	if rdb == nil {
		return nil
	}
	return redisTickets{rdb}
}
