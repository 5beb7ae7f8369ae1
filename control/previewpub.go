package control

import (
	"context"
	"fmt"

	"github.com/sbxedge/sbx/activity/redisstore"
	"github.com/sbxedge/sbx/internal/edgeapi"
)

// openPreviewPublisher tells every edge replica about changed preview
// hosts over Redis pub/sub, when Redis is configured; the edge's route
// cache TTL bounds staleness when it is not (or a message is lost).
func openPreviewPublisher(cfg Config) (publish func(ctx context.Context, inv edgeapi.Invalidation) error, closeFn func() error, err error) {
	if cfg.RedisURL == "" {
		return nil, func() error { return nil }, nil
	}
	client, err := redisstore.NewClient(cfg.RedisURL)
	if err != nil {
		return nil, nil, fmt.Errorf("preview invalidation: %w", err)
	}
	publish = func(ctx context.Context, inv edgeapi.Invalidation) error {
		if err := client.Publish(ctx, edgeapi.PreviewInvalidateChannel, inv.Payload()).Err(); err != nil {
			return fmt.Errorf("publish preview invalidation: %w", err)
		}
		return nil
	}
	return publish, client.Close, nil
}
