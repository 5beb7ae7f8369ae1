// Package wstest is the test kit for WebSockets through the preview
// proxy: an app a sandbox would serve (a page and an echo socket, bound
// to loopback, which is the sandbox's own for the local provider), a
// client that reaches every preview host at the proxy's listener, and
// checks that a socket is closed for a revoked authority.
package wstest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// RevokeWithin is how long an open connection may outlive its authority
// (issue 11: within 5 s on every edge replica).
const RevokeWithin = 5 * time.Second

// Page opens a WebSocket to the page's own /ws and records how it ends
// in window.wsState ("connecting", "open", or "closed <code> <reason>"),
// for a browser test.
const Page = `<!doctype html><title>ws</title><p id="msg">ws page</p><script>
window.wsState = "connecting";
const ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws");
ws.onopen = () => { ws.send("hi"); };
ws.onmessage = () => { window.wsState = "open"; };
ws.onclose = (e) => { window.wsState = "closed " + e.code + " " + e.reason; };
</script>`

// App serves Page at / and an echo WebSocket at /ws on 127.0.0.1 until
// the test ends, and returns its port.
func App(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ws" {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprint(w, Page)
			return
		}
		EchoSocket("echo: ")(w, r)
	})}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close() // hijacked sockets end with the proxy's side
		<-done
	})
	return ln.Addr().(*net.TCPAddr).Port
}

// EchoSocket is an app's WebSocket: it sends every message back with
// prefix before it until the client goes, and on "bye" drops the socket
// without a close frame, as a crashing app does. It takes every origin:
// the proxy, not the app, decides which may connect.
func EchoSocket(prefix string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, msg, err := c.Read(r.Context())
			if err != nil || string(msg) == "bye" {
				return
			}
			if err := c.Write(r.Context(), typ, append([]byte(prefix), msg...)); err != nil {
				return
			}
		}
	}
}

// Dial opens a WebSocket to previewURL + "/ws" through the proxy
// listening at proxyAddr, sending the preview's own Origin and hdr, and
// proves it echoes.
func Dial(t *testing.T, proxyAddr, previewURL string, hdr http.Header) *websocket.Conn {
	t.Helper()
	u, err := url.Parse(previewURL)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	for k, v := range hdr {
		h[k] = v
	}
	h.Set("Origin", u.Scheme+"://"+u.Host)
	d := &net.Dialer{}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, proxyAddr)
	}}}
	ws := *u
	ws.Scheme, ws.Path = "ws", "/ws"
	if u.Scheme == "https" {
		ws.Scheme = "wss"
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, ws.String(), &websocket.DialOptions{HTTPClient: hc, HTTPHeader: h})
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("dial %s: %v (status %d)", ws.String(), err, status)
	}
	t.Cleanup(func() { c.CloseNow() })
	Echo(t, c, "hello")
	return c
}

// Echo sends msg and wants it echoed.
func Echo(t *testing.T, c *websocket.Conn, msg string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		t.Fatalf("write %q: %v", msg, err)
	}
	_, got, err := c.Read(ctx)
	if err != nil || string(got) != "echo: "+msg {
		t.Fatalf("echo of %q: %q, %v", msg, got, err)
	}
}

// WantPolicyClose waits up to RevokeWithin from since for c to be closed
// with 1008 (policy violation) and a reason.
func WantPolicyClose(t *testing.T, c *websocket.Conn, since time.Time, what string) {
	t.Helper()
	ctx, cancel := context.WithDeadline(t.Context(), since.Add(RevokeWithin))
	defer cancel()
	_, msg, err := c.Read(ctx)
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.StatusPolicyViolation || ce.Reason == "" {
		t.Fatalf("%s: read got %q, %v after %v; want a close frame with code 1008 and a reason within %v",
			what, msg, err, time.Since(since).Round(time.Millisecond), RevokeWithin)
	}
	t.Logf("%s: closed with %d %q %v after the cause", what, ce.Code, ce.Reason, time.Since(since).Round(time.Millisecond))
}
