package control

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/sbxedge/sbx/activity"
	"github.com/sbxedge/sbx/activity/redisstore"
	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/invalidation"
)

// openActivity builds the activity store: on rdb when Redis is configured,
// shared by every replica, else cfg.Activity, this process's own.
func openActivity(cfg Config, rdb *redis.Client) (activity.Store, error) {
	if rdb == nil {
		return cfg.Activity, nil
	}
	s, err := redisstore.New(redisstore.Config{
		Client: rdb, Prefix: cfg.RedisPrefix, RetryFor: cfg.ActivityRetry,
		Registry: cfg.Registry, Logger: cfg.Logger.With("component", "activity"),
	})
	if err != nil {
		return nil, fmt.Errorf("activity store: %w", err)
	}
	return s, nil
}

// previewPublisher tells every edge replica about changed preview hosts
// over Redis pub/sub; the edge's route cache TTL bounds staleness when
// there is no Redis (nil then) or a message is lost.
func previewPublisher(rdb *redis.Client) func(ctx context.Context, inv edgeapi.Invalidation) error {
	if rdb == nil {
		return nil
	}
	return func(ctx context.Context, inv edgeapi.Invalidation) error {
		return invalidation.Publish(ctx, rdb, inv)
	}
}

// Wake blocks until the sandbox is ready, restoring it if it is
// suspended; see lifecycle.Manager.Wake. The internal API is handed this.
func (s *Service) Wake(ctx context.Context, sandboxID string) error {
	return s.Life.Wake(ctx, sandboxID)
}
