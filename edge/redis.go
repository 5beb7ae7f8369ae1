package edge

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sbxedge/sbx/activity/redisstore"
	"github.com/sbxedge/sbx/internal/edgeapi"
)

// openRedis opens the edge's one Redis client and, unless activity is
// handed in or turned off, the activity store on it, where control's idle
// detector reads SSH and preview activity.
func (e *Edge) openRedis() error {
	if e.cfg.RedisURL != "" {
		var err error
		if e.rdb, err = redisstore.NewClient(e.cfg.RedisURL); err != nil {
			return fmt.Errorf("redis: %w", err)
		}
	}
	switch {
	case e.cfg.Activity != nil:
		e.act = e.cfg.Activity
	case e.cfg.NoActivity || e.rdb == nil:
		e.log.Warn("no activity store: SSH and preview activity is not recorded; control must run without idle offload")
	default:
		s, err := redisstore.New(redisstore.Config{
			Client: e.rdb, Prefix: e.cfg.ActivityPrefix, Registry: e.reg, Logger: e.log.With("component", "activity"),
		})
		if err != nil {
			return fmt.Errorf("activity: %w", err)
		}
		e.act, e.closeA = s, s.Close
	}
	return nil
}

// subscribeInvalidations calls invalidate with every preview label control
// publishes, until the returned stop is called. go-redis re-subscribes
// after a disconnect; messages lost meanwhile are covered by the route
// TTL.
func subscribeInvalidations(rdb *redis.Client, invalidate func(context.Context, edgeapi.Invalidation), log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sub := rdb.Subscribe(ctx, edgeapi.PreviewInvalidateChannel)
	// Wait for the subscription, so an invalidation published right after
	// this returns is not missed. (Receive must not run concurrently with
	// Channel, hence first.)
	if _, err := sub.Receive(ctx); err != nil {
		log.Warn("subscribe to preview invalidations", "err", err)
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
					log.Warn("preview invalidation dropped", "err", err)
					continue
				}
				// Bounded, so a hung control cannot stall the
				// invalidations behind this one for long.
				rctx, cancelOne := context.WithTimeout(ctx, 10*time.Second)
				invalidate(rctx, inv)
				cancelOne()
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
