package control

import (
	"context"
	"errors"
	"fmt"

	"github.com/sbxedge/sbx/activity"
	"github.com/sbxedge/sbx/activity/memstore"
	"github.com/sbxedge/sbx/activity/redisstore"
)

// openActivity builds the activity store: Redis when a URL is configured,
// shared by every replica, else in memory for one process. close stops
// the store, then its client.
func openActivity(cfg Config) (activity.Store, func() error, error) {
	if cfg.RedisURL == "" {
		s := memstore.New(nil)
		return s, s.Close, nil
	}
	client, err := redisstore.NewClient(cfg.RedisURL)
	if err != nil {
		return nil, nil, fmt.Errorf("activity store: %w", err)
	}
	s, err := redisstore.New(redisstore.Config{
		Client: client, Prefix: cfg.RedisPrefix, RetryFor: cfg.ActivityRetry,
		Registry: cfg.Registry, Logger: cfg.Logger.With("component", "activity"),
	})
	if err != nil {
		_ = client.Close()
		return nil, nil, fmt.Errorf("activity store: %w", err)
	}
	return s, func() error { return errors.Join(s.Close(), client.Close()) }, nil
}

// Wake blocks until the sandbox is ready, restoring it if it is
// suspended; see lifecycle.Manager.Wake. Edge packages are handed this.
func (s *Service) Wake(ctx context.Context, sandboxID string) error {
	return s.Life.Wake(ctx, sandboxID)
}
