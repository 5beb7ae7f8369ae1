package preview

import (
	"log/slog"
	"net/http"
	"time"
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

// NewServer wraps h in an http.Server with the edge's limits. Bodies and
// responses have no global deadline: downloads, uploads, WebSockets and
// event streams last as long as they move. With h2c it also accepts
// HTTP/2 without TLS (prior knowledge), for sbx dev and for TLS
// terminated in front.
func NewServer(h http.Handler, log *slog.Logger, h2c bool) *http.Server {
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
	return srv
}
