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
// reads them. Without Redis the edge records nothing, and says so: control
// would then see SSH sessions through this edge as idle.
func openActivity(cfg Config, reg prometheus.Registerer, log *slog.Logger) (*redisstore.Store, func(), error) {
	if cfg.Preview.RedisURL == "" {
		log.Warn("no --redis-url: SSH activity is not recorded; run control without idle offload, or give both the same Redis")
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
