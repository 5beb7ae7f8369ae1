package h1

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Connection states, for Shutdown: only an idle connection (between
// requests) may be closed under the loop.
const (
	stateIdle int32 = iota
	stateActive
	stateClosed
)

// watchDelay is how long a request runs before the loop starts watching
// its connection for the client going away. Most answers are back well
// before; the watch costs a goroutine and a read, so only the slow ones
// (a wake, a long poll, a stream) pay for it.
const watchDelay = 50 * time.Millisecond

var (
	readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufSize) }}
	writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4<<10) }}
)

// conn is one connection on the lean loop.
type conn struct {
	srv    *Server
	nc     net.Conn
	src    srcReader // what br reads: nc, after any byte the watch read
	br     *bufio.Reader
	bw     *bufio.Writer
	state  atomic.Int32
	ctx    context.Context // the requests' context, ended with the conn
	cancel context.CancelFunc
	remote string
	tls    *tls.ConnectionState
	// deadline: the loop may have left a read deadline set (the idle,
	// head or body one), which a loop without an idle timeout lifts.
	deadline bool
	// headDeadline is when the request head being read must be in
	// (zero: no header timeout); a handed-over connection keeps it.
	headDeadline time.Time
	// Per-request state: requests on a connection are served one after
	// another.
	req  *http.Request // the request being served
	body *body         // its body; nil without one
	resp response      // reused

	watch watcher
	// watching is closed when a watch's read, still running when its
	// request was served, returns; nil: none. Only the loop touches it.
	watching chan struct{}
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{srv: s, nc: nc, remote: nc.RemoteAddr().String()}
	c.src.nc = nc
	c.ctx, c.cancel = context.WithCancel(context.WithValue(context.WithValue(context.Background(),
		http.ServerContextKey, s.srv), http.LocalAddrContextKey, nc.LocalAddr()))
	c.watch.c = c
	return c
}

// srcReader reads the connection, after the bytes read ahead of a
// connection handed over.
type srcReader struct {
	nc      net.Conn
	pending []byte
}

func (r *srcReader) Read(p []byte) (int, error) {
	if len(r.pending) > 0 {
		n := copy(p, r.pending)
		r.pending = r.pending[n:]
		return n, nil
	}
	return r.nc.Read(p)
}

func (c *conn) closeIfIdle() {
	if c.state.CompareAndSwap(stateIdle, stateClosed) {
		_ = c.nc.Close()
	}
}

// serve runs the loop until the connection ends or is handed over.
func (c *conn) serve() {
	handedOff := false
	defer func() {
		c.cancel()
		if !handedOff {
			_ = c.nc.Close()
		}
		c.srv.connDone(c)
	}()
	if !c.srv.lean {
		c.srv.handoff.give(c.nc)
		handedOff = true
		return
	}
	if tc, ok := c.nc.(*tls.Conn); ok {
		if !c.handshake(tc) {
			return
		}
		if p := tc.ConnectionState().NegotiatedProtocol; p != "" && p != "http/1.1" {
			c.srv.handoff.give(c.nc)
			handedOff = true
			return
		}
	}
	c.br = readers.Get().(*bufio.Reader)
	c.br.Reset(&c.src)
	c.bw = writers.Get().(*bufio.Writer)
	c.bw.Reset(c.nc)
	defer func() {
		if c.watching != nil {
			// A watch still reading into br: closing ends its read.
			_ = c.nc.Close()
			<-c.watching
		}
		c.br.Reset(nil)
		readers.Put(c.br)
		c.bw.Reset(nil)
		writers.Put(c.bw)
	}()
	for first := true; ; first = false {
		if c.srv.closing.Load() {
			return
		}
		// Idle from here until a request starts: Shutdown may close it.
		c.state.CompareAndSwap(stateActive, stateIdle)
		// A new connection has the header timeout to send its first
		// request; a kept-alive one the idle timeout for each next.
		wait := c.srv.srv.IdleTimeout
		if first {
			wait = c.srv.srv.ReadHeaderTimeout
		}
		if wait > 0 {
			_ = c.nc.SetReadDeadline(time.Now().Add(wait))
			c.deadline = true
		} else if c.deadline {
			_ = c.nc.SetReadDeadline(time.Time{})
			c.deadline = false
		}
		if w := c.watching; w != nil {
			// The last request's watch is reading the connection (under
			// the deadline just set): its read is this one's first.
			c.watching = nil
			<-w
		}
		if _, err := c.br.Peek(1); err != nil {
			return
		}
		if !c.state.CompareAndSwap(stateIdle, stateActive) {
			return // closed by Shutdown
		}
		c.headDeadline = time.Time{}
		if d := c.srv.srv.ReadHeaderTimeout; d > 0 {
			c.headDeadline = time.Now().Add(d)
			// A head already whole in the buffer (the common case: it
			// came in one segment) is read without a read, so the
			// deadline would only cost a timer set and reset. A
			// handed-over connection still gets it (prefixConn).
			if buf, _ := c.br.Peek(c.br.Buffered()); !bytes.Contains(buf, crlfcrlf) {
				_ = c.nc.SetReadDeadline(c.headDeadline)
				c.deadline = true
			}
		}
		head, err := readHead(c.br)
		if err == nil {
			err = c.parse(head)
		}
		if err != nil {
			if !errors.Is(err, errNotPlain) {
				return // the client went away, or was too slow
			}
			c.handOff()
			handedOff = true
			return
		}
		_, _ = c.br.Discard(len(head))
		// A body still to come must come within the body timeout;
		// body.Read lifts it at the end. Without one, the idle or head
		// deadline stays: nothing reads the connection while the
		// handler runs but the watch, which lifts it first, and the
		// loop's next read sets its own. (Lifting it here cost a timer
		// change per request.)
		if c.body != nil && c.body.left > int64(c.br.Buffered()) {
			_ = c.nc.SetReadDeadline(time.Now().Add(c.srv.bodyTimeout))
			c.deadline = true
		}
		if !c.serveRequest() {
			return
		}
	}
}

// handshake completes a TLS handshake within the header timeout, as
// net/http does.
func (c *conn) handshake(tc *tls.Conn) bool {
	if d := c.srv.srv.ReadHeaderTimeout; d > 0 {
		_ = tc.SetDeadline(time.Now().Add(d))
	}
	if err := tc.HandshakeContext(c.ctx); err != nil {
		var re tls.RecordHeaderError
		if !errors.As(err, &re) && !errors.Is(err, io.EOF) {
			c.srv.logf("http: TLS handshake error from %s: %v", c.remote, err)
		}
		return false
	}
	_ = tc.SetDeadline(time.Time{})
	st := tc.ConnectionState()
	c.tls = &st
	return true
}

// handOff gives the connection, with what was read of it, to net/http.
func (c *conn) handOff() {
	buf, _ := c.br.Peek(c.br.Buffered())
	// What the buffer holds, then anything the source still had.
	read := append(bytes.Clone(buf), c.src.pending...)
	pc := &prefixConn{Conn: c.nc, src: srcReader{nc: c.nc, pending: read}, tls: c.tls, headDeadline: c.headDeadline}
	_ = c.nc.SetReadDeadline(time.Time{})
	c.srv.handoff.give(pc)
}

// serveRequest runs the handler on the parsed request and finishes its
// answer; false: the connection is not to be used again.
func (c *conn) serveRequest() (keep bool) {
	r, w := c.req, &c.resp
	w.reset(c, r)
	c.watch.arm()
	defer func() {
		c.watch.disarm()
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				buf := make([]byte, 64<<10)
				buf = buf[:runtime.Stack(buf, false)]
				c.srv.logf("http: panic serving %v: %v\n%s", c.remote, v, buf)
			}
			keep = false
		}
		if c.body != nil {
			c.body.close()
		}
		c.req, c.body = nil, nil
	}()
	c.srv.handler.ServeHTTP(w, r)
	err := w.finish()
	gone := c.watch.disarm() // the deferred call is then a no-op
	if err != nil || gone {
		return false
	}
	return !w.closeAfter && (c.body == nil || c.body.drain())
}

// errNotPlain is a request the lean loop leaves to net/http.
var errNotPlain = errors.New("h1: not a plain request")

// readHead returns the request head at the start of br's buffer, up to
// and including its blank line, without consuming it.
func readHead(br *bufio.Reader) ([]byte, error) {
	// Peek(n) waits for n bytes: ask for what is buffered, and for one
	// byte more only when that holds no whole head.
	n := max(br.Buffered(), 1)
	for {
		b, err := br.Peek(n)
		i := bytes.Index(b, crlfcrlf)
		end := len(b)
		if i >= 0 {
			end = i + 4
		}
		if bareLF(b[:end]) {
			// Lines ended by LF alone: net/http takes them; the lean
			// loop would wait for a CRLF pair that never comes.
			return nil, errNotPlain
		}
		if i >= 0 {
			return b[:end], nil
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull) || len(b) == br.Size():
			return nil, errNotPlain // longer than the buffer: net/http's
		case err != nil && len(b) > 0:
			// A partial head: net/http answers what it makes of it.
			return nil, fmt.Errorf("%w: %w", errNotPlain, err)
		case err != nil:
			return nil, err
		case !plainSoFar(b):
			return nil, errNotPlain
		}
		// All that came in with the last read, or one byte more: not a
		// byte at a time over bytes already here (a rescan each).
		n = min(max(len(b)+1, br.Buffered()), br.Size())
	}
}

var crlfcrlf = []byte("\r\n\r\n")

// bareLF reports whether b has an LF not preceded by a CR.
func bareLF(b []byte) bool {
	for i := bytes.IndexByte(b, '\n'); i >= 0; {
		if i == 0 || b[i-1] != '\r' {
			return true
		}
		j := bytes.IndexByte(b[i+1:], '\n')
		if j < 0 {
			return false
		}
		i += 1 + j
	}
	return false
}

// watcher notices a client going away while a slow request is served,
// by reading the connection in the background once watchDelay has
// passed, as net/http does for every request. Unlike net/http's, the
// read is not stopped when the request has been served (a deadline in
// the past, a wait for the read to return, the deadline lifted: a timer
// set twice and a goroutine woken per slow request): it reads into the
// loop's own buffer, and the loop waits for it as its next read.
type watcher struct {
	c       *conn
	mu      sync.Mutex
	timer   *time.Timer
	armed   bool          // a request is being served
	fired   bool          // the delay passed
	running chan struct{} // closed when the read returns; nil: not started
	gone    bool          // the read failed while the request was served
}

// watchStarted is called when a watch starts reading; a test swaps it to
// act once the watch runs rather than sleep past watchDelay.
var watchStarted = func() {}

func (w *watcher) arm() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed, w.fired, w.running, w.gone = true, false, nil, false
	if w.timer == nil {
		w.timer = time.AfterFunc(watchDelay, w.fire)
		return
	}
	w.timer.Reset(watchDelay)
}

func (w *watcher) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	// A late timer, for a request already served, finds armed false.
	w.fired = w.armed
	w.startLocked()
}

// bodyDone is called when the request body is read to its end: the
// connection is free to watch from then on.
func (w *watcher) bodyDone() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.startLocked()
}

// startLocked starts the read once the delay has passed, the body is
// read and nothing of a next request is buffered: from then until the
// loop's next Peek, nothing else reads br.
func (w *watcher) startLocked() {
	if !w.fired || w.running != nil || w.c.body != nil && !w.c.body.done() || w.c.br.Buffered() > 0 {
		return
	}
	// The loop leaves the last read deadline set while the handler runs
	// (nothing else reads): the watch waits for the client with none.
	// Under mu while armed, so before the loop's next deadline is set.
	_ = w.c.nc.SetReadDeadline(time.Time{})
	w.c.deadline = false
	done := make(chan struct{})
	w.running = done
	watchStarted()
	go func() {
		defer close(done)
		// Into br, as the loop's Peek would: a next request's bytes
		// (pipelined, or sent after the answer) land where it reads
		// them. An error is kept by the connection (EOF and a closed
		// connection stay so; a deadline holds until the loop moves
		// it), and the loop's Peek meets it again.
		_, err := w.c.br.Peek(1)
		if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.armed && w.running == done {
			// The client is gone while its request is served: end
			// what it asked for.
			w.gone = true
			w.c.cancel()
		}
	}()
}

// disarm ends the watch once the handler has returned, and reports
// whether the client went away meanwhile. A read it started goes on, as
// the loop's next (c.watching).
func (w *watcher) disarm() (gone bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.timer.Stop()
	if w.running != nil {
		w.c.watching = w.running
	}
	gone = w.gone
	w.armed, w.fired, w.running = false, false, nil
	return gone
}
