package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/sbxedge/sbx/internal/connlog"
)

// recordStream opens the connection log's record of a stream the API
// serves itself (terminal, exec stream). The client kind is what the
// client states (Sbx-Client) or else what its user agent says.
func (s *Server) recordStream(r *http.Request, kind connlog.Kind, sandboxID string) *connlog.Conn {
	ua := r.UserAgent()
	return s.conns.Open(connlog.Record{
		SandboxID: sandboxID, Kind: kind, Credential: callerID(r), ClientAddr: r.RemoteAddr,
		ClientKind:   connlog.Detect(connlog.Signals{Explicit: r.Header.Get(connlog.HeaderClient), UserAgent: ua}),
		ClientDetail: ua,
	})
}

// endReason is why a stream whose context is ctx ended, for the log.
func endReason(ctx context.Context) string {
	cause := context.Cause(ctx)
	if cause == nil || errors.Is(cause, context.Canceled) {
		return connlog.EndClosed
	}
	return cause.Error()
}
