// Command edge is the network edge: the SSH broker and the preview proxy,
// stateless and replicated (package edge). It asks control's internal API
// who may go where and signs upstream certificates with the shared CA key.
//
// It must not link the store, the job queue or Kubernetes clients; a test
// (deps_test.go) keeps it so.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/sbxedge/sbx/edge"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, level, err := parseConfig(os.Args[1:], os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "edge:", err)
		os.Exit(2)
	}
	cfg.Logger = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if err := edge.Run(ctx, cfg, nil); err != nil {
		cfg.Logger.Error("edge stopped", "err", err)
		os.Exit(1)
	}
}
