package httplimit_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbxedge/sbx/internal/httplimit"
)

// serveBody serves h behind d on a real listener; the handler's read
// error, if any, is reported on the returned channel.
func serveBody(t *testing.T, d httplimit.BodyDeadline, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: d.Wrap(h), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	return ln.Addr().String()
}

// readAll is a handler reading the whole body, answering 200 with its
// length or 400 with the read error.
func readAll(trust bool, errs chan<- error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if trust {
			httplimit.Trust(r)
		}
		n, err := io.Copy(io.Discard, r.Body)
		errs <- err
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_, _ = fmt.Fprint(w, n)
	})
}

// sendHead writes a request head declaring a body of length n.
func sendHead(t *testing.T, addr string, n int) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", n); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestBodyNeverArrives: a declared body that never comes is cut at the
// timeout: the handler's read fails and the connection ends.
func TestBodyNeverArrives(t *testing.T) {
	errs := make(chan error, 1)
	addr := serveBody(t, httplimit.BodyDeadline{Timeout: 300 * time.Millisecond}, readAll(false, errs))
	c := sendHead(t, addr, 100000)
	select {
	case err := <-errs:
		if err == nil {
			t.Fatal("the handler read a body that was never sent")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the body read still waits 10 s past a 300 ms deadline")
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("the connection did not end: %v", err)
	}
}

// TestBodyTrickle: before Trust, a byte now and then does not hold the
// body open: the deadline moves by 1/MinRate s a byte, not by the time
// between bytes.
func TestBodyTrickle(t *testing.T) {
	errs := make(chan error, 1)
	addr := serveBody(t, httplimit.BodyDeadline{Timeout: 300 * time.Millisecond, MinRate: 1000}, readAll(false, errs))
	c := sendHead(t, addr, 1000)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
				if _, err := c.Write([]byte{'x'}); err != nil {
					return
				}
			}
		}
	}()
	select {
	case err := <-errs:
		if err == nil {
			t.Fatal("the trickled body was read whole")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a byte every 100 ms held the body 10 s past a 300 ms deadline")
	}
}

// TestBodyTrustedMovesWithProgress: after Trust, a body that keeps
// moving outlives the timeout many times over.
func TestBodyTrustedMovesWithProgress(t *testing.T) {
	errs := make(chan error, 1)
	addr := serveBody(t, httplimit.BodyDeadline{Timeout: 300 * time.Millisecond, MinRate: 1 << 20}, readAll(true, errs))
	const n = 20
	c := sendHead(t, addr, n)
	for range n {
		time.Sleep(100 * time.Millisecond) // 2 s in all, a byte well within each 300 ms
		if _, err := c.Write([]byte{'x'}); err != nil {
			t.Fatalf("write: %v", err)
		}
	}
	if err := <-errs; err != nil {
		t.Fatalf("a trusted body moving every 100 ms was cut: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(body) != fmt.Sprint(n) {
		t.Fatalf("got %d %q, want 200 %q", resp.StatusCode, body, fmt.Sprint(n))
	}
}

// TestUnreadBodyAnsweredAtOnce: a handler that refuses without reading
// the body (a 401) is answered at once and the connection closed, where
// net/http would first wait to read up to 256 KiB of it.
func TestUnreadBodyAnsweredAtOnce(t *testing.T) {
	addr := serveBody(t, httplimit.BodyDeadline{Timeout: time.Hour}, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "who are you", http.StatusUnauthorized)
	}))
	c := sendHead(t, addr, 100000)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer while the body is unsent: %v", err)
	}
	_, _ = io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusUnauthorized || !resp.Close {
		t.Fatalf("got %d close=%v, want 401 closing the connection", resp.StatusCode, resp.Close)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after the answer: %v, want EOF", err)
	}
}

// TestReadBodyKeepsConnection: a body read to its declared length (a
// JSON decoder stops there without seeing EOF) keeps the connection.
func TestReadBodyKeepsConnection(t *testing.T) {
	addr := serveBody(t, httplimit.BodyDeadline{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 5)
		_, err := io.ReadFull(r.Body, buf)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_, _ = w.Write(buf)
	}))
	c := sendHead(t, addr, 5)
	_, _ = io.WriteString(c, "hello")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.Close || strings.TrimSpace(string(body)) != "hello" {
		t.Fatalf("got %q close=%v, want hello on a kept connection", body, resp.Close)
	}
}

// TestBodyEndRacingHijack: a Hijack (a WebSocket's 101) while the body's
// last read is still returning, on another goroutine (the transport that
// sends the body upstream), completes. net/http stops its background
// read, started at the body's EOF, with a read deadline in the past; the
// body's deadline must not be lifted over it, or the Hijack waits for a
// byte from a client that is waiting for its answer. The connection holds
// each step until the one before it is done, so the race is played in its
// losing order every time.
func TestBodyEndRacingHijack(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &raceGate{abort: make(chan struct{}), bodyRead: make(chan struct{}), liftHeld: make(chan struct{})}
	hijacked := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.started.Store(true)
		go func() {
			defer close(g.bodyRead)
			_, _ = io.Copy(io.Discard, r.Body)
		}()
		// The body read to its end, or held in its last deadline change.
		select {
		case <-g.bodyRead:
		case <-g.liftHeld:
		}
		c, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = c.Close()
		}
		hijacked <- err
	})
	srv := &http.Server{Handler: httplimit.BodyDeadline{}.Wrap(h)}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(gateListener{ln, g}) }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(); _ = srv.Close(); <-done })
	if _, err := io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nx=1"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-hijacked:
		if err != nil {
			t.Fatalf("Hijack: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Hijack still waiting after 10 s for net/http's background read: the body's deadline was lifted over its abort")
	}
}

// raceGate orders a body's end against a Hijack (TestBodyEndRacingHijack).
type raceGate struct {
	started   atomic.Bool   // the handler runs
	lifts     atomic.Int32  // deadlines lifted since
	liftHeld  chan struct{} // closed when a second lift is held
	abort     chan struct{} // closed once a deadline in the past is set
	abortOnce sync.Once
	bodyRead  chan struct{} // closed when the handler's body reader is done
}

type gateListener struct {
	net.Listener
	g *raceGate
}

func (l gateListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &gateConn{Conn: c, g: l.g}, nil
}

type gateConn struct {
	net.Conn
	g *raceGate
}

// Read holds net/http's background read (its only 1-byte read) until
// the abort and the body's reader are both done: then it reads under
// whatever deadline they left.
func (c *gateConn) Read(p []byte) (int, error) {
	if len(p) == 1 && c.g.started.Load() {
		<-c.g.abort
		<-c.g.bodyRead
	}
	return c.Conn.Read(p)
}

// SetReadDeadline lets the first lift in the handler (net/http's, as it
// starts the background read) through and holds a second until the abort
// has set its deadline in the past.
func (c *gateConn) SetReadDeadline(t time.Time) error {
	g := c.g
	switch {
	case !g.started.Load():
	case t.IsZero():
		if g.lifts.Add(1) == 2 {
			close(g.liftHeld)
			<-g.abort
		}
	case t.Before(time.Unix(2, 0)):
		err := c.Conn.SetReadDeadline(t)
		g.abortOnce.Do(func() { close(g.abort) })
		return err
	}
	return c.Conn.SetReadDeadline(t)
}
