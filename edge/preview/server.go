package preview

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/sbxedge/sbx/edge/internal/h1"
	"github.com/sbxedge/sbx/internal/httplimit"
)

// Server limits. Each bounds what one client can hold on the edge.
const (
	// A browser's headers, cookies included, fit in a few KiB; 64 KiB
	// leaves room for big app cookies without letting a client park
	// megabytes per connection.
	maxHeaderBytes = 64 << 10
	// Slowloris: a client must finish its headers promptly.
	readHeaderTimeout = 10 * time.Second
	// Keep-alive connections of idle browsers are reclaimed.
	idleTimeout = 2 * time.Minute
)

// NewServer serves h with the edge's limits: plain HTTP/1.1 requests on
// h1's lean loop, everything else (HTTP/2, upgrades, streamed bodies,
// whatever the lean loop does not take) on net/http. Bodies and
// responses have no global deadline: downloads, uploads, WebSockets and
// event streams last as long as they move. With h2c it also accepts
// HTTP/2 without TLS (prior knowledge), for sbx dev and for TLS
// terminated in front. A Proxy with DisableLeanRelay is served by
// net/http alone, as it was before either lean path.
//
// Request bodies have netlimit's default deadline; NewServerWith sets
// another.
func NewServer(h http.Handler, log *slog.Logger, h2c bool) *h1.Server {
	return NewServerWith(h, log, h2c, httplimit.BodyDeadline{})
}

// NewServerWith is NewServer with body's deadline on request bodies,
// which holds before the proxy has looked at who is asking.
func NewServerWith(h http.Handler, log *slog.Logger, h2c bool, body httplimit.BodyDeadline) *h1.Server {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		Protocols:         new(http.Protocols),
	}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetHTTP2(true)
	srv.Protocols.SetUnencryptedHTTP2(h2c)
	p, _ := h.(*Proxy)
	return h1.New(srv, p == nil || !p.cfg.DisableLeanRelay, body)
}
