package netlimit_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/sbxedge/sbx/internal/netlimit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// failing is a listener whose Accept fails with errs, one each, then
// hands out pipes.
type failing struct {
	mu     sync.Mutex
	errs   []error
	closed chan struct{}
	once   sync.Once
}

func (f *failing) Accept() (net.Conn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.closed:
		return nil, net.ErrClosed
	default:
	}
	if len(f.errs) > 0 {
		err := f.errs[0]
		f.errs = f.errs[1:]
		return nil, err
	}
	c, _ := net.Pipe()
	return c, nil
}
func (f *failing) Close() error   { f.once.Do(func() { close(f.closed) }); return nil }
func (f *failing) Addr() net.Addr { return &net.TCPAddr{} }

type counter struct{ n atomic.Int64 }

func (c *counter) Inc() { c.n.Add(1) }
func (c *counter) Dec() { c.n.Add(-1) }

func acceptErr(errno syscall.Errno) error {
	return &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", errno)}
}

// TestListenerSurvivesTemporaryErrors: a burst of EMFILE and the like is
// counted one by one, logged once (and its end once), waited out with
// net/http's backoff, and Accept then returns a connection.
func TestListenerSurvivesTemporaryErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var errs []error
		for range 10 {
			errs = append(errs, acceptErr(syscall.EMFILE))
		}
		errs = append(errs, acceptErr(syscall.ENFILE), acceptErr(syscall.ECONNABORTED))
		inner := &failing{errs: errs, closed: make(chan struct{})}
		var logs bytes.Buffer
		var acceptErrors, open counter
		l := netlimit.Wrap(inner, netlimit.Config{Name: "test", Logger: slog.New(slog.NewTextHandler(&logs, nil)),
			AcceptErrors: &acceptErrors, Open: &open})
		start := time.Now()
		c, err := l.Accept()
		if err != nil {
			t.Fatalf("Accept: %v, want a connection after the burst", err)
		}
		// 5+10+20+...+640 ms, then 1 s for each of the rest.
		want := 5 * time.Millisecond * (1<<8 - 1)
		want += 4 * time.Second
		if got := time.Since(start); got != want {
			t.Errorf("backed off %v in all, want %v", got, want)
		}
		if got := acceptErrors.n.Load(); got != 12 {
			t.Errorf("accept errors counted: %d, want 12", got)
		}
		if got := open.n.Load(); got != 1 {
			t.Errorf("open: %d, want 1", got)
		}
		lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
		if len(lines) != 2 || !strings.Contains(lines[0], "accept failing") || !strings.Contains(lines[1], "errors=12") {
			t.Errorf("logs: %q, want one line for the burst and one for its end", lines)
		}
		_ = c.Close()
		_ = c.Close() // a second Close gives nothing back twice
		if got := open.n.Load(); got != 0 {
			t.Errorf("open after Close: %d, want 0", got)
		}
		_ = l.Close()
	})
}

// TestListenerPermanentError: an error that is not temporary is
// returned, not retried.
func TestListenerPermanentError(t *testing.T) {
	bad := acceptErr(syscall.EINVAL)
	l := netlimit.Wrap(&failing{errs: []error{bad}, closed: make(chan struct{})}, netlimit.Config{Logger: slog.New(slog.DiscardHandler)})
	defer l.Close()
	if _, err := l.Accept(); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("Accept: %v, want EINVAL", err)
	}
}

// TestCloseEndsBackoff: Close ends an Accept waiting out a burst.
func TestCloseEndsBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		errs := make([]error, 100)
		for i := range errs {
			errs[i] = acceptErr(syscall.EMFILE)
		}
		l := netlimit.Wrap(&failing{errs: errs, closed: make(chan struct{})}, netlimit.Config{Logger: slog.New(slog.DiscardHandler)})
		got := make(chan error, 1)
		go func() { _, err := l.Accept(); got <- err }()
		time.Sleep(3 * time.Second)
		_ = l.Close()
		if err := <-got; !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after Close: %v, want net.ErrClosed", err)
		}
	})
}

// TestCeiling: beyond MaxConns, Accept waits for a connection to close;
// Close ends the wait.
func TestCeiling(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var open, full counter
	l := netlimit.Wrap(ln, netlimit.Config{Name: "test", MaxConns: 2, Open: &open, Full: &full, Logger: slog.New(slog.DiscardHandler)})
	defer l.Close()
	accepted := make(chan net.Conn, 3)
	done := make(chan error, 1)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				done <- err
				return
			}
			accepted <- c
		}
	}()
	for i := range 3 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		defer c.Close()
	}
	first, second := <-accepted, <-accepted
	select {
	case <-accepted:
		t.Fatal("a third connection was accepted over a ceiling of 2")
	case <-time.After(200 * time.Millisecond):
	}
	if got := open.n.Load(); got != 2 {
		t.Errorf("open: %d, want 2", got)
	}
	_ = first.Close()
	third := <-accepted
	// The wait for the third, and the loop's next Accept, again at two.
	waitFull(t, &full, 2)
	_ = second.Close()
	_ = third.Close()
	_ = l.Close()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v, want net.ErrClosed", err)
	}
}

func waitFull(t *testing.T, c *counter, want int64) {
	t.Helper()
	for range 100 {
		if c.n.Load() == want {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("ceiling waits: %d, want %d", c.n.Load(), want)
}

func TestTemporary(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{acceptErr(syscall.EMFILE), true},
		{acceptErr(syscall.ENFILE), true},
		{acceptErr(syscall.ECONNABORTED), true},
		{acceptErr(syscall.ENOBUFS), true},
		{fmt.Errorf("wrapped: %w", acceptErr(syscall.EMFILE)), true},
		{acceptErr(syscall.EINVAL), false},
		{net.ErrClosed, false},
		{&net.OpError{Op: "accept", Err: net.ErrClosed}, false},
	} {
		if got := netlimit.Temporary(tc.err); got != tc.want {
			t.Errorf("Temporary(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
