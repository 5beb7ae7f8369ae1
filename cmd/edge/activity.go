package main

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sbxedge/sbx/activity/redisstore"
)

// openActivity connects the broker's activity marks and connection
// heartbeats to the Redis of --redis-url, where control's idle detector
// reads them. With --no-activity (Validate refuses a missing Redis
// otherwise) it records nothing.
func openActivity(cfg Config, reg prometheus.Registerer, log *slog.Logger) (*redisstore.Store, func(), error) {
	if cfg.NoActivity {
		log.Warn("--no-activity: SSH and preview activity is not recorded; control must run without idle offload")
		return nil, func() {}, nil
	}
	client, err := redisstore.NewClient(cfg.Preview.RedisURL)
	if err != nil {
		return nil, nil, fmt.Errorf("activity: %w", err)
	}
	s, err := redisstore.New(redisstore.Config{
		Client: client, Prefix: cfg.ActivityPrefix, Registry: reg, Logger: log.With("component", "activity"),
	})
	if err != nil {
		_ = client.Close()
		return nil, nil, fmt.Errorf("activity: %w", err)
	}
	return s, func() {
		if err := errors.Join(s.Close(), client.Close()); err != nil {
			log.Warn("close activity store", "err", err)
		}
	}, nil
}
