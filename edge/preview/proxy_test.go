package preview_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sbxedge/sbx/internal/testkit/wstest"
)

// testApp is the dev server inside the sandbox.
type testApp struct {
	sseNext chan struct{} // the SSE handler sends its next event when told
}

func newTestApp() *testApp { return &testApp{sseNext: make(chan struct{})} }

// payload is a deterministic stream of n bytes.
func payload(n int64) io.Reader {
	return io.LimitReader(rand.NewChaCha8([32]byte{1, 2, 3}), n)
}

func (a *testApp) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/big":
		n, _ := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		_, _ = io.Copy(w, payload(n))
	case "/upload":
		h := sha256.New()
		n, err := io.Copy(h, r.Body)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		fmt.Fprintf(w, "%d %x", n, h.Sum(nil))
	case "/sse":
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 1; i <= 3; i++ {
			fmt.Fprintf(w, "id: %d\ndata: event %d\n\n", i, i)
			http.NewResponseController(w).Flush()
			if i == 3 {
				return
			}
			select {
			case <-a.sseNext:
			case <-r.Context().Done():
				return
			case <-time.After(10 * time.Second):
				return
			}
		}
	case "/ws":
		wstest.EchoSocket("echo: ")(w, r)
	default:
		w.Header().Set("Set-Cookie", "app=1; Path=/")
		fmt.Fprintf(w, "hello from the sandbox, host %s, path %s", r.Host, r.URL.RequestURI())
	}
}

func curl(t *testing.T, e *env, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is required (apt-get install curl)")
	}
	base := []string{"-sS", "--max-time", "120", "--connect-to", "::" + e.addr}
	out, err := exec.CommandContext(t.Context(), "curl", append(base, args...)...).Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("curl %v: %v %s", args, err, stderr)
	}
	return string(out)
}

func TestCurlHTTP1AndHTTP2WithBearer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newTestApp())
	e.expose("webapp", "sbx-a", "acct-a", false, false)
	for _, proto := range []struct{ flag, want string }{{"--http1.1", "1.1"}, {"--http2-prior-knowledge", "2"}} {
		out := curl(t, e, proto.flag, "-w", "\n%{http_code} %{http_version}",
			"-H", "Authorization: Bearer "+tokenA, "-H", "X-Forwarded-For: 6.6.6.6", "-H", "X-Forwarded-Host: evil.example",
			"-H", "Cookie: __Host-sbx-preview=forged; theme=dark", e.url("webapp", "/some/path?q=1"))
		body, status, _ := strings.Cut(out, "\n")
		if status != "200 "+proto.want {
			t.Fatalf("%s: status %q body %q, want 200 over HTTP/%s", proto.flag, status, body, proto.want)
		}
		if want := "hello from the sandbox, host " + e.host("webapp") + ", path /some/path?q=1"; body != want {
			t.Errorf("%s: body %q, want %q", proto.flag, body, want)
		}
		r := e.upstream.last()
		if got := r.Header.Get("Authorization"); got != "" {
			t.Errorf("%s: upstream saw Authorization %q", proto.flag, got)
		}
		if got := r.Header.Get("Cookie"); got != "theme=dark" {
			t.Errorf("%s: upstream Cookie %q, want only the app's theme=dark", proto.flag, got)
		}
		if got := r.Header.Get("X-Forwarded-For"); got != "127.0.0.1" {
			t.Errorf("%s: upstream X-Forwarded-For %q, want 127.0.0.1 (the client's spoofed value dropped)", proto.flag, got)
		}
		if got := r.Header.Get("X-Forwarded-Host"); got != e.host("webapp") {
			t.Errorf("%s: upstream X-Forwarded-Host %q, want %q", proto.flag, got, e.host("webapp"))
		}
		if got := r.Header.Get("X-Forwarded-Proto"); got != "http" {
			t.Errorf("%s: upstream X-Forwarded-Proto %q", proto.flag, got)
		}
	}
	// Hop-by-hop headers (RFC 9110 7.6.1) end at the proxy, including any
	// the client names in Connection.
	out := curl(t, e, "--http1.1", "-H", "Authorization: Bearer "+tokenA, "-H", "Connection: keep-alive, X-Hop",
		"-H", "X-Hop: 1", "-H", "Proxy-Authorization: Basic eDp5", "-H", "Keep-Alive: timeout=5", "-H", "X-End-To-End: 1", e.url("webapp", "/"))
	r := e.upstream.last()
	for _, h := range []string{"X-Hop", "Proxy-Authorization", "Keep-Alive"} {
		if v := r.Header.Get(h); v != "" {
			t.Errorf("hop-by-hop %s reached the sandbox: %q (%s)", h, v, out)
		}
	}
	if r.Header.Get("X-End-To-End") != "1" {
		t.Errorf("end-to-end header lost: %v", r.Header)
	}

	// The preview-token header works the same and is stripped too.
	out = curl(t, e, "-w", "\n%{http_code}", "-H", "X-Sbx-Preview-Token: "+tokenA, e.url("webapp", "/"))
	if !strings.HasSuffix(out, "\n200") || e.upstream.last().Header.Get("X-Sbx-Preview-Token") != "" {
		t.Errorf("preview token header: %q, upstream header %q", out, e.upstream.last().Header.Get("X-Sbx-Preview-Token"))
	}
}

func TestLargeTransfersByteForByte(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newTestApp())
	e.expose("big", "sbx-a", "acct-a", false, false)
	const n = 200 << 20
	h := sha256.New()
	_, _ = io.Copy(h, payload(n))
	want := hex.EncodeToString(h.Sum(nil))

	dir := t.TempDir()
	down := filepath.Join(dir, "down")
	curl(t, e, "-o", down, "-H", "Authorization: Bearer "+tokenA, e.url("big", "/big?n="+strconv.Itoa(n)))
	f, err := os.Open(down)
	if err != nil {
		t.Fatal(err)
	}
	h.Reset()
	got, _ := io.Copy(h, f)
	f.Close()
	if got != n || hex.EncodeToString(h.Sum(nil)) != want {
		t.Errorf("download: %d bytes sha256 %x, want %d bytes %s", got, h.Sum(nil), n, want)
	}
	// Upload the same bytes back, chunked (no Content-Length), so the
	// proxy cannot have buffered it whole to learn its size.
	out := curl(t, e, "-T", down, "-H", "Transfer-Encoding: chunked", "-H", "Authorization: Bearer "+tokenA, e.url("big", "/upload"))
	if wantOut := fmt.Sprintf("%d %s", n, want); out != wantOut {
		t.Errorf("upload: sandbox saw %q, want %q", out, wantOut)
	}
}

func TestWebSocketEchoAndHostPolicy(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newTestApp())
	e.expose("fwd", "sbx-a", "acct-a", false, false)
	e.expose("lh", "sbx-a", "acct-a", false, true)
	for _, tc := range []struct{ label, wantHost string }{
		{"fwd", e.host("fwd")},
		{"lh", fmt.Sprintf("localhost:%d", e.upPort)},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		hc := e.client()
		c, _, err := websocket.Dial(ctx, "ws://"+e.host(tc.label)+"/ws", &websocket.DialOptions{
			HTTPClient: hc, HTTPHeader: http.Header{"Authorization": {"Bearer " + tokenA}},
		})
		if err != nil {
			cancel()
			t.Fatalf("%s: dial: %v", tc.label, err)
		}
		for i := range 3 {
			msg := fmt.Sprintf("ping %d", i)
			if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
				t.Fatal(err)
			}
			_, got, err := c.Read(ctx)
			if err != nil || string(got) != "echo: "+msg {
				t.Fatalf("%s: read %q, %v; want echo: %s", tc.label, got, err, msg)
			}
		}
		c.Close(websocket.StatusNormalClosure, "")
		hc.CloseIdleConnections()
		cancel()
		ws := e.upstream.last()
		if ws.Host != tc.wantHost || ws.Header.Get("Authorization") != "" {
			t.Errorf("%s: upgrade reached the sandbox with Host %q Authorization %q, want Host %q and none", tc.label, ws.Host, ws.Header.Get("Authorization"), tc.wantHost)
		}
		// Plain HTTP on the same port sees the same Host: hot reload
		// breaks when the two differ.
		_, body := e.get(tc.label, "/", "Authorization", "Bearer "+tokenA)
		if !strings.Contains(body, "host "+tc.wantHost+",") {
			t.Errorf("%s: HTTP request saw %q, want host %s", tc.label, body, tc.wantHost)
		}
	}
	// Without a credential an upgrade is refused, not redirected.
	resp, _ := e.get("fwd", "/ws", "Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Version", "13",
		"Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==", "Sec-Fetch-Mode", "navigate", "Accept", "text/html")
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("upgrade without credential: %d, want 401", resp.StatusCode)
	}
}

func TestSSEEventsArriveOneByOne(t *testing.T) {
	t.Parallel()
	app := newTestApp()
	e := newEnv(t, app)
	e.expose("events", "sbx-a", "acct-a", true, false)
	cmd := exec.CommandContext(t.Context(), "curl", "-sSN", "--max-time", "30", "--connect-to", "::"+e.addr, e.url("events", "/sse"))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("curl is required: %v", err)
	}
	defer func() { _ = cmd.Wait() }()
	lines := bufio.NewScanner(stdout)
	for i := 1; i <= 3; i++ {
		// Event i must arrive while the sandbox is still holding event
		// i+1 back: nothing is buffered on the way.
		var got string
		for lines.Scan() {
			if l := lines.Text(); strings.HasPrefix(l, "data: ") {
				got = l
				break
			}
		}
		if want := fmt.Sprintf("data: event %d", i); got != want {
			t.Fatalf("event %d: got %q, want %q (err %v)", i, got, want, lines.Err())
		}
		if i < 3 {
			select {
			case app.sseNext <- struct{}{}:
			case <-time.After(10 * time.Second):
				t.Fatal("the sandbox never waited for the next event")
			}
		}
	}
}
