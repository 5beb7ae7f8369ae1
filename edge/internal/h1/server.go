// Package h1 is a lean HTTP/1.1 server for the preview proxy's plain
// requests, with net/http for everything else.
//
// net/http's server costs a goroutine hand-off per request (the
// background read that notices a client going away), a context and a
// response with its two buffered writers per request, and a string per
// header line. The preview proxy answers small requests in a few tens of
// microseconds, so those costs are a good part of its time. This server
// reads each request head itself and serves it on the connection's own
// goroutine when the head is plain HTTP/1.1 in its strictest form: a
// known method, an origin-form target, CRLF line ends, one valid Host,
// no Transfer-Encoding, Upgrade, Expect or folded lines, a body of at
// most MaxBody bytes with a declared length, and a head that fits the
// read buffer.
//
// Anything else, from the first byte on or from any later request of a
// connection, is handed with the bytes read so far to a net/http server,
// which serves the rest of that connection as if it had read them
// itself: its parsing, errors and limits stay the single source of truth
// for every request that is not plain, and HTTP/2 (h2c, or ALPN "h2"
// after a TLS handshake), upgrades and streamed bodies never take the
// lean loop.
package h1

import (
	"cmp"
	"context"
	"crypto/tls"
	"log"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sbxedge/sbx/internal/httplimit"
	"github.com/sbxedge/sbx/internal/netlimit"
)

// MaxBody is the largest request body the lean loop reads; a request
// declaring more is handed to net/http, which streams it.
const MaxBody = 32 << 10

// readBufSize is the lean loop's read buffer: a request head must fit in
// it (net/http's is the same size; it takes longer heads).
const readBufSize = 4 << 10

// Server serves connections on the lean loop, and hands net/http (the
// fallback) those it does not take.
type Server struct {
	srv     *http.Server
	handler http.Handler
	logger  *log.Logger
	lean    bool // false: every connection goes to net/http as accepted
	// bodyTimeout bounds a lean request's body (at most MaxBody bytes):
	// a client that declares one and sends none is cut after it.
	bodyTimeout time.Duration

	handoff   *connQueue // connections for srv
	fbOnce    sync.Once
	fbStarted atomic.Bool
	fbDone    chan struct{} // closed when srv.Serve has returned

	closing atomic.Bool
	mu      sync.Mutex // guards lns and conns
	lns     map[net.Listener]struct{}
	conns   map[*conn]struct{}
	wg      sync.WaitGroup // connection goroutines
}

// New takes srv over: its Handler serves both paths, its
// ReadHeaderTimeout, IdleTimeout and ErrorLog apply to the lean loop too,
// and its ConnContext and Handler are wrapped so that a TLS connection
// handed over mid-way keeps its http.Request.TLS. Request bodies on both
// paths have body's deadline: the lean loop's (small, of a declared
// length) its Timeout from the end of the head, net/http's the moving
// one of httplimit.BodyDeadline. Serve with the returned Server, not with
// srv. Without lean, every connection goes to net/http untouched: the
// way back, with one code path around it.
func New(srv *http.Server, lean bool, body httplimit.BodyDeadline) *Server {
	s := &Server{
		srv: srv, handler: srv.Handler, logger: srv.ErrorLog, lean: lean,
		bodyTimeout: cmp.Or(body.Timeout, httplimit.DefaultBodyTimeout),
		handoff:     newConnQueue(),
		fbDone:      make(chan struct{}),
		lns:         map[net.Listener]struct{}{},
		conns:       map[*conn]struct{}{},
	}
	if s.handler == nil {
		s.handler = http.DefaultServeMux
	}
	inner, connCtx := body.Wrap(s.handler), srv.ConnContext
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if pc, ok := c.(*prefixConn); ok && pc.tls != nil {
			ctx = context.WithValue(ctx, tlsStateKey{}, pc.tls)
		}
		if connCtx != nil {
			ctx = connCtx(ctx, c)
		}
		return ctx
	}
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil {
			if st, ok := r.Context().Value(tlsStateKey{}).(*tls.ConnectionState); ok {
				r.TLS = st
			}
		}
		closeAfterCoded(w, r)
		inner.ServeHTTP(w, r)
	})
	return s
}

// closeAfterCoded ends an HTTP/1 connection once a request whose body
// came with a Transfer-Encoding is answered. net/http reads such a body
// by its chunked coding and deletes a Content-Length sent beside it
// without a trace, so a request that carried both, the request-smuggling
// shape after which RFC 9112 6.1 says to close, cannot be told here from
// a plain chunked one: every chunked request closes its connection.
// HTTP/1.0 requests close theirs too: net/http drops a Transfer-Encoding
// on them unseen and frames by Content-Length, where RFC 9112 6.1 calls
// the framing faulty. Browsers send no chunked bodies over HTTP/1.1, and
// nothing current speaks HTTP/1.0 keep-alive; the rare client that does
// either pays a reconnect. The lean loop never takes such a request.
func closeAfterCoded(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 1 && (r.ProtoMinor == 0 || len(r.TransferEncoding) > 0) {
		w.Header().Set("Connection", "close")
	}
}

type tlsStateKey struct{}

// Serve accepts connections on ln until Shutdown or Close, when it
// returns http.ErrServerClosed.
func (s *Server) Serve(ln net.Listener) error {
	if !s.track(ln) {
		return http.ErrServerClosed
	}
	defer s.untrack(ln)
	s.fbOnce.Do(func() {
		s.fbStarted.Store(true)
		go func() {
			defer close(s.fbDone)
			_ = s.srv.Serve(s.handoff)
		}()
	})
	var delay netlimit.Backoff
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.closing.Load() {
				return http.ErrServerClosed
			}
			if netlimit.Temporary(err) {
				// Out of file descriptors and the like: back off as
				// net/http does, rather than spin or stop serving. A
				// netlimit.Listener never returns these; this is for
				// a bare one.
				d := delay.Next()
				s.logf("h1: accept error: %v; retrying in %v", err, d)
				time.Sleep(d)
				continue
			}
			return err
		}
		delay.Reset()
		c := s.newConn(nc)
		if c == nil {
			_ = nc.Close()
			continue
		}
		go c.serve()
	}
}

// ServeTLS serves TLS on ln with cfg: each connection's handshake is done
// on its own goroutine, then HTTP/1.1 takes the lean loop and any other
// protocol (h2) goes to net/http.
func (s *Server) ServeTLS(ln net.Listener, cfg *tls.Config) error {
	cfg = cfg.Clone()
	for _, p := range []string{"http/1.1", "h2"} {
		if !slices.Contains(cfg.NextProtos, p) {
			cfg.NextProtos = append([]string{p}, cfg.NextProtos...)
		}
	}
	return s.Serve(tls.NewListener(ln, cfg))
}

func (s *Server) track(ln net.Listener) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		return false
	}
	s.lns[ln] = struct{}{}
	return true
}

func (s *Server) untrack(ln net.Listener) {
	s.mu.Lock()
	delete(s.lns, ln)
	s.mu.Unlock()
}

// newConn registers a connection; nil once the server is closing.
func (s *Server) newConn(nc net.Conn) *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		return nil
	}
	c := newConn(s, nc)
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	return c
}

func (s *Server) connDone(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.wg.Done()
}

// stopListening marks the server closing and closes its listeners.
func (s *Server) stopListening() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closing.Store(true)
	for ln := range s.lns {
		_ = ln.Close()
	}
	s.handoff.close()
}

// closeIdle closes the lean connections waiting for a request, and
// reports whether none is left at all.
func (s *Server) closeIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.closeIfIdle()
	}
	return len(s.conns) == 0
}

// Shutdown stops accepting, closes idle connections, and waits for the
// requests in flight to finish (on both paths) or for ctx to end.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stopListening()
	fbErr := make(chan error, 1)
	go func() { fbErr <- s.srv.Shutdown(ctx) }()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !s.closeIdle() {
		select {
		case <-ctx.Done():
			<-fbErr
			return ctx.Err()
		case <-t.C:
		}
	}
	s.wg.Wait()
	err := <-fbErr
	s.waitFallback()
	return err
}

// waitFallback waits for net/http's Serve, once it has been told to stop.
func (s *Server) waitFallback() {
	if s.fbStarted.Load() {
		<-s.fbDone
	}
}

// Close closes every listener and connection at once.
func (s *Server) Close() error {
	s.stopListening()
	err := s.srv.Close()
	s.mu.Lock()
	for c := range s.conns {
		_ = c.nc.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.waitFallback()
	return err
}

func (s *Server) logf(format string, args ...any) {
	if s.logger != nil {
		s.logger.Printf(format, args...)
		return
	}
	log.Printf(format, args...)
}

// connQueue is the listener net/http serves: the connections the lean
// loop handed over.
type connQueue struct {
	ch     chan net.Conn
	done   chan struct{}
	closed sync.Once
}

func newConnQueue() *connQueue {
	return &connQueue{ch: make(chan net.Conn), done: make(chan struct{})}
}

// give hands c to net/http, or closes it when the server is closing.
func (q *connQueue) give(c net.Conn) {
	select {
	case q.ch <- c:
	case <-q.done:
		_ = c.Close()
	}
}

func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.ch:
		return c, nil
	case <-q.done:
		return nil, net.ErrClosed
	}
}

func (q *connQueue) close() { q.closed.Do(func() { close(q.done) }) }

func (q *connQueue) Close() error { q.close(); return nil }

func (q *connQueue) Addr() net.Addr { return queueAddr{} }

type queueAddr struct{}

func (queueAddr) Network() string { return "h1-handoff" }
func (queueAddr) String() string  { return "h1-handoff" }

// prefixConn is a connection handed over with the bytes the lean loop had
// already read from it, which it reads first.
type prefixConn struct {
	net.Conn
	src srcReader            // the bytes read, then the connection
	tls *tls.ConnectionState // nil for plain connections
	// headDeadline is the lean loop's header deadline for the head it
	// hands over. net/http's first deadline, for that head, is capped by
	// it: a fresh ReadHeaderTimeout would give a slow client more time
	// than the server allows.
	headDeadline time.Time
}

func (c *prefixConn) Read(p []byte) (int, error) { return c.src.Read(p) }

// SetReadDeadline caps the first deadline net/http sets (its header
// deadline, set before its first read) by headDeadline; later ones pass.
func (c *prefixConn) SetReadDeadline(t time.Time) error {
	if d := c.headDeadline; !d.IsZero() {
		c.headDeadline = time.Time{}
		if t.IsZero() || d.Before(t) {
			t = d
		}
	}
	return c.Conn.SetReadDeadline(t)
}

// CloseWrite half-closes the connection when it can (TCP, TLS): a
// hijacked WebSocket passes its upstream's end on with it.
func (c *prefixConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}
