// Package netlimit bounds what clients can hold on a server's listener:
// a ceiling on open connections, and accept errors that are survived
// rather than fatal (a process out of descriptors backs off and keeps
// serving). It links no net/http, so the sandbox's init can use it; the
// request-body deadline is internal/httplimit.
//
// It links no metrics library: the sandbox's init uses it too. Package
// netlimit/netlimitprom makes the Prometheus collectors it reports to.
package netlimit

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// Counter and Gauge are the parts of a metric a Listener reports to;
// Prometheus collectors satisfy them.
type (
	Counter interface{ Inc() }
	Gauge   interface {
		Inc()
		Dec()
	}
)

// Config describes one listener's limits. The zero value only retries
// temporary accept errors.
type Config struct {
	// Name names the listener in logs ("API", "previews").
	Name string
	// MaxConns is the most connections open at once; Accept waits for
	// one to close beyond it, leaving new ones in the kernel's backlog.
	// 0: no ceiling.
	MaxConns int
	// Logger receives one line when accepting starts failing and one when
	// it recovers, however many errors came between; nil: slog.Default.
	Logger *slog.Logger
	// AcceptErrors counts every temporary accept error (nil: not counted).
	AcceptErrors Counter
	// Open follows the connections open (nil: not followed).
	Open Gauge
	// Full counts the times Accept had to wait at MaxConns (nil: not
	// counted).
	Full Counter
}

// Listener is a net.Listener with Config's limits: its Accept returns
// only a connection or a permanent error (the listener closed), never a
// temporary one.
type Listener struct {
	net.Listener
	cfg   Config
	slots chan struct{} // nil without a ceiling
	done  chan struct{} // closed by Close
	close sync.Once

	mu      sync.Mutex // guards the burst's state below
	failing int        // errors in the current burst; 0: accepting
	atFull  bool       // the ceiling was reached and not yet left
	backoff Backoff
}

// Wrap returns ln with cfg's limits. Closing the Listener closes ln.
func Wrap(ln net.Listener, cfg Config) *Listener {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	l := &Listener{Listener: ln, cfg: cfg, done: make(chan struct{})}
	if cfg.MaxConns > 0 {
		l.slots = make(chan struct{}, cfg.MaxConns)
	}
	return l
}

// Accept waits for a free slot under the ceiling, then for a connection.
// A temporary error (out of descriptors, a connection reset before it
// was accepted) is counted and waited out with Backoff; Close ends the
// wait.
func (l *Listener) Accept() (net.Conn, error) {
	if err := l.acquire(); err != nil {
		return nil, err
	}
	for {
		c, err := l.Listener.Accept()
		if err == nil {
			l.recovered()
			if l.cfg.Open != nil {
				l.cfg.Open.Inc()
			}
			return &conn{Conn: c, l: l}, nil
		}
		if !Temporary(err) || l.closed() {
			l.release()
			return nil, err
		}
		wait := l.failed(err)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-l.done:
			t.Stop()
			l.release()
			return nil, net.ErrClosed
		}
	}
}

// Close closes the listener and ends an Accept waiting for a slot or
// backing off.
func (l *Listener) Close() error {
	l.close.Do(func() { close(l.done) })
	return l.Listener.Close()
}

func (l *Listener) closed() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

func (l *Listener) acquire() error {
	if l.slots == nil {
		return nil
	}
	select {
	case l.slots <- struct{}{}:
		l.mu.Lock()
		l.atFull = false
		l.mu.Unlock()
		return nil
	case <-l.done:
		return net.ErrClosed
	default:
	}
	l.mu.Lock()
	first := !l.atFull
	l.atFull = true
	l.mu.Unlock()
	if l.cfg.Full != nil {
		l.cfg.Full.Inc()
	}
	if first {
		l.cfg.Logger.Warn("connection ceiling reached; new connections wait in the backlog",
			"listener", l.cfg.Name, "max_conns", l.cfg.MaxConns)
	}
	select {
	case l.slots <- struct{}{}:
		return nil
	case <-l.done:
		return net.ErrClosed
	}
}

func (l *Listener) release() {
	if l.slots != nil {
		<-l.slots
	}
}

// failed records a temporary error and returns how long to wait.
func (l *Listener) failed(err error) time.Duration {
	if l.cfg.AcceptErrors != nil {
		l.cfg.AcceptErrors.Inc()
	}
	l.mu.Lock()
	l.failing++
	first := l.failing == 1
	wait := l.backoff.Next()
	l.mu.Unlock()
	if first {
		l.cfg.Logger.Error("accept failing; backing off and retrying", "listener", l.cfg.Name, "err", err)
	}
	return wait
}

func (l *Listener) recovered() {
	l.mu.Lock()
	n := l.failing
	l.failing = 0
	l.backoff.Reset()
	l.mu.Unlock()
	if n > 0 {
		l.cfg.Logger.Warn("accepting again", "listener", l.cfg.Name, "errors", n)
	}
}

// conn gives its slot back once, on its first Close.
type conn struct {
	net.Conn
	l    *Listener
	once sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		if c.l.cfg.Open != nil {
			c.l.cfg.Open.Dec()
		}
		c.l.release()
	})
	return err
}

// CloseWrite half-closes a TCP connection, so proxies that pass a
// half-close on (WebSockets) still can; without one it closes.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

// ReadFrom keeps the kernel's sendfile and splice for responses copied
// from a file or a socket.
func (c *conn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(writerOnly{c.Conn}, r)
}

type writerOnly struct{ io.Writer }

// Temporary reports whether an accept error is worth retrying: the
// process or the system is out of descriptors or buffers, or a
// connection went away before it was accepted. net/http treats the same
// errors (and only them, through net.Error's deprecated Temporary) so.
func Temporary(err error) bool {
	if errors.Is(err, net.ErrClosed) {
		return false
	}
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
		syscall.ECONNABORTED, syscall.ECONNRESET, syscall.EINTR, syscall.EAGAIN, os.ErrDeadlineExceeded} {
		if errors.Is(err, e) {
			return true
		}
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Backoff is an accept loop's wait after a temporary error, as net/http
// waits: 5 ms, doubling up to 1 s, until Reset after a success.
type Backoff struct{ d time.Duration }

// Backoff bounds.
const (
	MinBackoff = 5 * time.Millisecond
	MaxBackoff = time.Second
)

// Next returns the next wait.
func (b *Backoff) Next() time.Duration {
	b.d = min(max(2*b.d, MinBackoff), MaxBackoff)
	return b.d
}

// Reset starts the next burst at MinBackoff.
func (b *Backoff) Reset() { b.d = 0 }
