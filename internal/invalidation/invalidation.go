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
// not missed. go-redis re-subscribes after a disconnect; whatever was
// published meanwhile is lost (a revocation made while Redis was
// stopped), so each re-subscription is applied as an InvalidateAll: the
// receivers re-check every connection at once rather than at their next
// periodic re-check (the preview proxy's 30 s; the SSH broker has none).
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
		ch := sub.ChannelWithSubscriptions()
		for {
			var inv edgeapi.Invalidation
			select {
			case <-ctx.Done():
				return
			case m, ok := <-ch:
				if !ok {
					return
				}
				switch m := m.(type) {
				case *redis.Subscription:
					// The first confirmation was read by Receive above;
					// any later one is go-redis re-subscribing after a
					// disconnect, with messages possibly missed.
					if m.Kind != "subscribe" {
						continue
					}
					log.Warn("invalidations re-subscribed after a disconnect; re-checking every connection")
					inv = edgeapi.Invalidation{Kind: edgeapi.InvalidateAll}
				case *redis.Message:
					var err error
					if inv, err = edgeapi.ParseInvalidation(m.Payload); err != nil {
						log.Warn("invalidation dropped", "err", err)
						continue
					}
				default:
					continue
				}
			}
			actx, cancelOne := context.WithTimeout(ctx, applyTimeout)
			apply(actx, inv)
			cancelOne()
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
