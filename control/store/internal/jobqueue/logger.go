package jobqueue

import (
	"log/slog"

	"github.com/sbxedge/sbx/internal/demotelog"
)

// Logger is logger as River should use it: River's Info records (a
// producer's job counts every few seconds while periodic jobs run, client
// starts and stops) are its own bookkeeping, so they go out at Debug;
// warnings and errors are unchanged. A nil logger stays nil (River's
// default).
func Logger(logger *slog.Logger) *slog.Logger { return demotelog.Info(logger) }
