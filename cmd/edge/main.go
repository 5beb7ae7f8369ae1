// Command edge is the network edge: the SSH broker and the preview proxy,
// stateless and replicated (package edge). It asks control's internal API
// who may go where and signs upstream certificates with the shared CA key.
//
// It must not link the store, the job queue or Kubernetes clients; a test
// (deps_test.go) keeps it so.
package main

import (
	"context"
	"log/slog"

	"github.com/sbxedge/sbx/cmd/internal/flagenv"
	"github.com/sbxedge/sbx/edge"
)

func main() {
	flagenv.Main("edge", parseConfig, func(ctx context.Context, cfg edge.Config, log *slog.Logger) error {
		cfg.Logger = log
		return edge.Run(ctx, cfg, nil)
	})
}
