// Package servicebase is the set-up control and the edge do alike before
// building parts of their own: the configuration checked, a logger and a
// metrics registry where the caller gave none, and the one Redis client a
// process shares among its parts.
package servicebase

import (
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sbxedge/sbx/activity/redisstore"
	"github.com/sbxedge/sbx/internal/metricsserver"
)

// Prepare checks a configuration with validate, then fills in the logger
// (one that discards) and the metrics registry (with the Go and process
// collectors, metricsserver.NewRegistry) it left nil. Nothing is filled in
// when validate fails.
func Prepare(validate func() error, log **slog.Logger, reg **prometheus.Registry) error {
	if err := validate(); err != nil {
		return err
	}
	if *log == nil {
		*log = slog.New(slog.DiscardHandler)
	}
	if *reg == nil {
		*reg = metricsserver.NewRegistry()
	}
	return nil
}

// Redis opens the process's Redis client on url (redisstore.NewClient's
// short timeouts), with go-redis's own log lines at DEBUG in log; an
// empty url means no Redis, and a nil client.
func Redis(url string, log *slog.Logger) (*redis.Client, error) {
	if url == "" {
		return nil, nil
	}
	redisstore.LogLibraryTo(log)
	rdb, err := redisstore.NewClient(url)
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	return rdb, nil
}
