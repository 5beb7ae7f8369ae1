package h1

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sbxedge/sbx/internal/httplimit"
)

// which reports, in an answer header, how a request was served.
func which(w http.ResponseWriter, r *http.Request) {
	_, lean := w.(*response)
	w.Header().Set("X-Served", fmt.Sprintf("lean=%v proto=%s tls=%v", lean, r.Proto, r.TLS != nil))
	_, _ = io.Copy(io.Discard, r.Body)
}

// start serves h on a lean (or not) Server and returns its address.
func start(t *testing.T, h http.HandlerFunc, lean bool, cfg *tls.Config) (*Server, string, <-chan error) {
	t.Helper()
	s := New(&http.Server{Handler: h, ReadHeaderTimeout: 2 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}, lean, httplimit.BodyDeadline{})
	ln := listen(t)
	served, stopped := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(stopped)
		if cfg != nil {
			served <- s.ServeTLS(ln, cfg)
			return
		}
		served <- s.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = s.Close()
		<-stopped
	})
	return s, ln.Addr().String(), served
}

// serveLean runs a lean Server for srv on a loopback listener until the
// test ends, and returns its address; for tests that need srv's own
// timeouts, where start's fixed ones will not do.
func serveLean(tb testing.TB, srv *http.Server) string {
	tb.Helper()
	srv.ErrorLog = log.New(io.Discard, "", 0)
	s := New(srv, true, httplimit.BodyDeadline{})
	ln := listen(tb)
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = s.Serve(ln) }()
	tb.Cleanup(func() { _ = s.Close(); <-stopped })
	return ln.Addr().String()
}

// dialRaw opens a connection with dial, for a test that speaks raw
// HTTP/1.1 on it, closed when the test ends.
func dialRaw(t *testing.T, dial func() (net.Conn, error)) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	return c, bufio.NewReader(c)
}

func tcp(addr string) func() (net.Conn, error) {
	return func() (net.Conn, error) { return net.Dial("tcp", addr) }
}

func selfSigned(t *testing.T) (*tls.Config, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), DNSNames: []string{"h1.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}, pool
}

// TestTLS: after the handshake, h2 goes to net/http and HTTP/1.1 to the
// lean loop; a request the loop hands over mid-connection keeps its TLS
// state.
func TestTLS(t *testing.T) {
	cfg, roots := selfSigned(t)
	_, addr, _ := start(t, which, true, cfg)
	clientTLS := &tls.Config{RootCAs: roots, ServerName: "h1.test"}
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	}
	for _, tc := range []struct {
		name string
		tr   *http.Transport
		want string
	}{
		{"h2", &http.Transport{DialContext: dial, TLSClientConfig: clientTLS, ForceAttemptHTTP2: true}, "lean=false proto=HTTP/2.0 tls=true"},
		{"http/1.1", &http.Transport{DialContext: dial, TLSClientConfig: clientTLS.Clone(), TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}, "lean=true proto=HTTP/1.1 tls=true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer tc.tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tc.tr}).Get("https://h1.test/")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if got := resp.Header.Get("X-Served"); got != tc.want {
				t.Errorf("served %q, want %q", got, tc.want)
			}
		})
	}

	t.Run("handed over mid-connection", func(t *testing.T) {
		c, br := dialRaw(t, func() (net.Conn, error) {
			return tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: "h1.test", NextProtos: []string{"http/1.1"}})
		})
		io.WriteString(c, "GET /1 HTTP/1.1\r\nHost: h1.test\r\n\r\n"+
			"POST /2 HTTP/1.1\r\nHost: h1.test\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n")
		for _, want := range []string{"lean=true proto=HTTP/1.1 tls=true", "lean=false proto=HTTP/1.1 tls=true"} {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if got := resp.Header.Get("X-Served"); got != want {
				t.Errorf("served %q, want %q", got, want)
			}
		}
	})
}

// TestNotLean: without lean, net/http serves every connection.
func TestNotLean(t *testing.T) {
	_, addr, _ := start(t, which, false, nil)
	resp, err := http.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got, want := resp.Header.Get("X-Served"), "lean=false proto=HTTP/1.1 tls=false"; got != want {
		t.Errorf("served %q, want %q", got, want)
	}
}

// TestClientGoneEndsRequest: a client that hangs up while its request
// waits ends the request's context, as net/http's background read does.
func TestClientGoneEndsRequest(t *testing.T) {
	ended := make(chan error, 1)
	_, addr, _ := start(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
			ended <- r.Context().Err()
		case <-time.After(10 * time.Second):
			ended <- errors.New("the request outlived its client by 10 s")
		}
	}, true, nil)
	started := onWatchStart(t)
	c, _ := dialRaw(t, tcp(addr))
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	waitWatch(t, started)
	c.Close()
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Errorf("request ended with %v, want context.Canceled", err)
	}
}

// TestClientGoneAfterIdleDeadline: the loop leaves the idle deadline set
// while a request is served; the watch lifts it, so a client that hangs
// up after it has passed still ends its request.
func TestClientGoneAfterIdleDeadline(t *testing.T) {
	started := onWatchStart(t)
	ended := make(chan error, 1)
	addr := serveLean(t, &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/slow" {
				return
			}
			select {
			case <-r.Context().Done():
				ended <- r.Context().Err()
			case <-time.After(5 * time.Second):
				ended <- errors.New("the request outlived its client by 5 s")
			}
		}),
		ReadHeaderTimeout: 2 * time.Second, IdleTimeout: 100 * time.Millisecond,
	})

	c, br := dialRaw(t, tcp(addr))
	// The second request is read under the idle deadline (100 ms).
	io.WriteString(c, "GET /fast HTTP/1.1\r\nHost: h\r\n\r\n")
	if _, err := http.ReadResponse(br, nil); err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: h\r\n\r\n")
	waitWatch(t, started)
	time.Sleep(300 * time.Millisecond) // past the idle deadline
	c.Close()
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Errorf("request ended with %v, want context.Canceled", err)
	}
}

// TestSlowRequestKeepsConnection: a request that outlasts watchDelay
// (the watch reads in the background meanwhile) leaves the connection
// usable, with a pipelined request's first byte where it belongs.
func TestSlowRequestKeepsConnection(t *testing.T) {
	started := onWatchStart(t)
	release := make(chan struct{})
	_, addr, _ := start(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release // slow: it ends once the next request was sent
		}
		io.WriteString(w, r.URL.Path)
	}, true, nil)
	c, br := dialRaw(t, tcp(addr))
	io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: h\r\n\r\n")
	waitWatch(t, started)
	io.WriteString(c, "GET /next HTTP/1.1\r\nHost: h\r\n\r\n")
	close(release)
	for _, want := range []string{"/slow", "/next"} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if string(body) != want {
			t.Errorf("answer %q, want %q", body, want)
		}
	}
}

// TestWatchedConnectionKeepsTimeouts: the read a watch started goes on
// past its request, as the connection's next read. A request sent after
// the answer is served from it, and a client that then sends nothing is
// still cut at the idle timeout (the deadline the loop sets reaches the
// read already running).
func TestWatchedConnectionKeepsTimeouts(t *testing.T) {
	started := onWatchStart(t)
	addr := serveLean(t, &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				select { // answered once watched
				case <-started:
				case <-time.After(10 * time.Second):
					t.Error("the watch on the connection never started")
				}
			}
			io.WriteString(w, r.URL.Path)
		}),
		ReadHeaderTimeout: 2 * time.Second, IdleTimeout: 200 * time.Millisecond,
	})

	c, br := dialRaw(t, tcp(addr))
	// The last is watched too, and the connection then left idle.
	for _, path := range []string{"/slow", "/next", "/slow"} {
		io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: h\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if body, _ := io.ReadAll(resp.Body); string(body) != path {
			t.Errorf("answer %q, want %q", body, path)
		}
	}
	// dialRaw's deadline (5 s) is far past the idle timeout.
	if b, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("idle connection: read %q %v, want EOF (closed at the idle timeout)", b, err)
	}
}

// TestShutdown: Shutdown closes idle connections at once, lets the
// request in flight finish with its answer, then Serve returns
// ErrServerClosed.
func TestShutdown(t *testing.T) {
	inHandler, release := make(chan struct{}), make(chan struct{})
	s, addr, served := start(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			close(inHandler)
			<-release
		}
		io.WriteString(w, "done")
	}, true, nil)

	idle, idleBR := dialRaw(t, tcp(addr))
	io.WriteString(idle, "GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	if resp, err := http.ReadResponse(idleBR, nil); err != nil {
		t.Fatal(err)
	} else {
		_, _ = io.Copy(io.Discard, resp.Body)
	}

	busy, busyBR := dialRaw(t, tcp(addr))
	io.WriteString(busy, "GET /hold HTTP/1.1\r\nHost: h\r\n\r\n")
	<-inHandler

	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	_ = idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := idleBR.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("idle connection: read %v, want EOF (closed by Shutdown)", err)
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with a request in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	resp, err := http.ReadResponse(busyBR, nil)
	if err != nil {
		t.Fatalf("request in flight: %v", err)
	}
	if body, _ := io.ReadAll(resp.Body); string(body) != "done" {
		t.Errorf("request in flight answered %q", body)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve returned %v, want ErrServerClosed", err)
	}
}

// TestBodyAfterHandler: a body read after its handler returned (by a
// goroutine the handler left behind) gets an error, never the next
// request's bytes.
func TestBodyAfterHandler(t *testing.T) {
	kept := make(chan io.Reader, 1)
	_, addr, _ := start(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/keep" {
			kept <- r.Body
		}
	}, true, nil)
	c, br := dialRaw(t, tcp(addr))
	io.WriteString(c, "POST /keep HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n\r\nbody"+
		"POST /next HTTP/1.1\r\nHost: h\r\nContent-Length: 6\r\n\r\nsecret")
	for range 2 {
		if _, err := http.ReadResponse(br, nil); err != nil {
			t.Fatal(err)
		}
	}
	b, err := io.ReadAll(<-kept)
	if err == nil || strings.Contains(string(b), "secret") {
		t.Errorf("late read got %q, %v; want an error and nothing of the next request", b, err)
	}
}

// TestCodedRequestClosesConnection: after a request whose body came with
// a Transfer-Encoding (alone, beside a Content-Length in either order,
// or folded), and after any HTTP/1.0 request, the connection is closed
// once the answer is out, on both paths, so that bytes after it are
// never read as another request.
func TestCodedRequestClosesConnection(t *testing.T) {
	next := "GET /next HTTP/1.1\r\nHost: h\r\n\r\n"
	for _, tc := range []struct {
		name string
		raw  string
		keep bool // the connection serves next
	}{
		{"content-length only", "POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc", true},
		{"chunked", "POST /a HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", false},
		{"content-length then chunked", "POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", false},
		{"chunked then content-length", "POST /a HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 40\r\n\r\n0\r\n\r\n", false},
		{"folded transfer-encoding", "POST /a HTTP/1.1\r\nHost: h\r\nTransfer-Encoding:\r\n chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n", false},
		{"http/1.0 keep-alive with transfer-encoding and content-length",
			"POST /a HTTP/1.0\r\nHost: h\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n", false},
		{"http/1.0 keep-alive", "POST /a HTTP/1.0\r\nHost: h\r\nConnection: keep-alive\r\nContent-Length: 3\r\n\r\nabc", false},
		{"plain, then content-length and chunked", "GET /1 HTTP/1.1\r\nHost: h\r\n\r\n" +
			"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", false},
	} {
		for _, lean := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/lean=%v", tc.name, lean), func(t *testing.T) {
				_, addr, _ := start(t, which, lean, nil)
				methods := []string{"POST", "GET"}
				if strings.HasPrefix(tc.raw, "GET") {
					methods = []string{"GET", "POST", "GET"}
				}
				got := exchange(t, addr, tc.raw+next, methods)
				served := strings.Count(got, "200 OK")
				want := len(methods) - 1
				if tc.keep {
					want = len(methods)
				}
				if served != want || !tc.keep && !strings.Contains(got, "close=true") {
					t.Errorf("served %d requests, want %d (and the last answer saying close when it does):\n%s", served, want, got)
				}
			})
		}
	}
}

// TestStalledBodyCut (issue 27, M1): on both paths, a request whose
// declared body never arrives is cut at the body timeout: a small one on
// the lean loop, a large one (over MaxBody) on net/http. The handler's
// read fails and the connection ends.
func TestStalledBodyCut(t *testing.T) {
	for _, tc := range []struct {
		name   string
		length int
	}{
		{"lean", 100},
		{"net/http", MaxBody + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			readErr := make(chan error, 1)
			s := New(&http.Server{
				Handler: http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
					_, err := io.Copy(io.Discard, r.Body)
					readErr <- err
				}),
				ReadHeaderTimeout: 2 * time.Second, ErrorLog: log.New(io.Discard, "", 0),
			}, true, httplimit.BodyDeadline{Timeout: 200 * time.Millisecond})
			ln := listen(t)
			served := make(chan error, 1)
			go func() { served <- s.Serve(ln) }()
			t.Cleanup(func() { _ = s.Close(); <-served })
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n", tc.length)
			select {
			case err := <-readErr:
				if err == nil {
					t.Fatal("the handler read a body that was never sent")
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the body read still waits 10 s past a 200 ms timeout")
			}
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.Copy(io.Discard, c); err != nil {
				t.Fatalf("the connection did not end: %v", err)
			}
		})
	}
}

// onWatchStart reports each start of a watch on the returned channel
// (dropping those nobody waits for), until the test ends.
func onWatchStart(t *testing.T) <-chan struct{} {
	started := make(chan struct{}, 1)
	watchStarted = func() {
		select {
		case started <- struct{}{}:
		default:
		}
	}
	t.Cleanup(func() { watchStarted = func() {} })
	return started
}

func waitWatch(t *testing.T, started <-chan struct{}) {
	t.Helper()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch on the connection never started")
	}
}
