// Package invalidation delivers control's invalidations
// (edgeapi.PreviewInvalidateChannel on Redis) to whoever ends the
// connections that rode on the authority that changed: the edge's preview
// proxy on every edge replica, and control's own exec and terminal
// streams on every control replica.
package invalidation

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sbxedge/sbx/internal/edgeapi"
)

// applyTimeout bounds one call of the handler, so a hung control cannot
// stall the invalidations behind it for long.
const applyTimeout = 10 * time.Second

// Subscribe calls apply with every invalidation published, one at a time,
// until the returned stop is called; stop waits for the goroutine. It
// returns once subscribed, so an invalidation published right after is
// not missed. go-redis re-subscribes after a disconnect; what is lost
// meanwhile is covered by each receiver's periodic re-check or TTL.
func Subscribe(rdb *redis.Client, apply func(context.Context, edgeapi.Invalidation), log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sub := rdb.Subscribe(ctx, edgeapi.PreviewInvalidateChannel)
	// Receive must not run concurrently with Channel, hence first.
	if _, err := sub.Receive(ctx); err != nil {
		log.Warn("subscribe to invalidations", "err", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer sub.Close()
		ch := sub.Channel()
		for {
			select {
			case <-ctx.Done():
				return
			case m, ok := <-ch:
				if !ok {
					return
				}
				inv, err := edgeapi.ParseInvalidation(m.Payload)
				if err != nil {
					log.Warn("invalidation dropped", "err", err)
					continue
				}
				actx, cancelOne := context.WithTimeout(ctx, applyTimeout)
				apply(actx, inv)
				cancelOne()
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// Publish sends inv to every subscriber on every replica: the edge's
// preview proxies and control's streams. Control publishes what its API
// changes; `sbx admin` publishes what it changes on the database.
func Publish(ctx context.Context, rdb *redis.Client, inv edgeapi.Invalidation) error {
	if err := rdb.Publish(ctx, edgeapi.PreviewInvalidateChannel, inv.Payload()).Err(); err != nil {
		return fmt.Errorf("publish preview invalidation: %w", err)
	}
	return nil
}
