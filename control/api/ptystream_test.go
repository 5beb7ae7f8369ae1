package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/coder/websocket"

	"github.com/sbxedge/sbx/control"
	"github.com/sbxedge/sbx/internal/testkit/chromiumtest"
)

// ptyClient is one terminal stream: output collects, the exit message is
// kept.
type ptyClient struct {
	t    *testing.T
	conn *websocket.Conn
	mu   sync.Mutex // guards out, exit
	out  bytes.Buffer
	exit map[string]any
	done chan struct{}
	end  error // why the stream ended; read after done closed
}

func (e *env) dialPty(t *testing.T, id, query string, hdr http.Header) (*ptyClient, *http.Response, error) {
	t.Helper()
	u := strings.Replace(e.svc.URL(), "http://", "ws://", 1) + "/api/v1/sandboxes/" + id + "/exec/stream?" + query
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		return nil, resp, err
	}
	p := &ptyClient{t: t, conn: conn, done: make(chan struct{})}
	go func() { // ends when the stream does; the cleanup closes it
		defer close(p.done)
		for {
			typ, data, err := conn.Read(context.Background())
			if err != nil {
				p.end = err
				return
			}
			p.mu.Lock()
			if typ == websocket.MessageBinary {
				p.out.Write(data)
			} else {
				_ = json.Unmarshal(data, &p.exit)
			}
			p.mu.Unlock()
		}
	}()
	t.Cleanup(func() { conn.CloseNow(); <-p.done })
	return p, resp, nil
}

func (p *ptyClient) send(v any) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	if s, ok := v.(string); ok {
		err = p.conn.Write(ctx, websocket.MessageBinary, []byte(s))
	} else {
		b, _ := json.Marshal(v)
		err = p.conn.Write(ctx, websocket.MessageText, b)
	}
	if err != nil {
		p.t.Fatalf("send %v: %v", v, err)
	}
}

// within is waitFor for at most d; -1 if want did not show.
func (p *ptyClient) within(mark int, want string, d time.Duration) int {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		p.mu.Lock()
		out := p.out.String()
		p.mu.Unlock()
		if i := strings.Index(out[mark:], want); i >= 0 {
			return mark + i + len(want)
		}
	}
	return -1
}

// waitFor waits until the output holds want after what was there when
// the mark was taken.
func (p *ptyClient) waitFor(mark int, want string) int {
	p.t.Helper()
	if i := p.within(mark, want, 20*time.Second); i >= 0 {
		return i
	}
	p.mu.Lock()
	out := p.out.String()
	p.mu.Unlock()
	p.t.Fatalf("terminal never showed %q; output so far %q", want, out[mark:])
	return 0
}

// TestPtyStream: a shell on the terminal stream sees its new size after a
// resize, echoes typed input through cat, is interrupted by a typed
// Ctrl-C, and reports its exit code; tickets are single use and bound to
// their sandbox; foreign browser origins are refused.
func TestPtyStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", false, func(c *control.Config) { c.StreamOrigins = []string{"app.example.com"} })
	id := e.createReady(t)
	bearerHdr := http.Header{"Authorization": {"Bearer " + e.tokens["dev"]}}

	p, _, err := e.dialPty(t, id, "command=sh&cols=80&rows=24", bearerHdr)
	if err != nil {
		t.Fatal(err)
	}
	p.send(map[string]any{"type": "resize", "cols": 100, "rows": 30})
	// SSH carries the resize as a window-change request beside the
	// session's data, and the server applies it on its own time: a stty
	// typed right after may still see 24 80. The size must come, so ask
	// again until it does (the deadline is waitFor's).
	mark := -1
	for deadline := time.Now().Add(20 * time.Second); mark < 0 && time.Now().Before(deadline); {
		p.send("stty size\n")
		mark = p.within(0, "30 100", time.Second)
	}
	if mark < 0 {
		mark = p.waitFor(0, "30 100") // fails, saying what the terminal showed
	}

	p.send("cat\n")
	p.send(map[string]any{"type": "stdin", "data": "typed into cat\n"})
	// The tty echoes the line, then cat prints it: twice.
	mark = p.waitFor(p.waitFor(mark, "typed into cat"), "typed into cat")
	p.send("\x04") // Ctrl-D ends cat

	p.send("sh -c 'echo $$ > sleeper.pid; exec sleep 300'\n")
	// Ctrl-C once sleep is the foreground job (checked inside the sandbox).
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		code, _, b := e.do("dev", "POST", "/api/v1/sandboxes/"+id+"/exec",
			jsonBody(map[string]any{"command": "test \"$(cat /proc/$(cat sleeper.pid)/comm 2>/dev/null)\" = sleep && echo running"}))
		if code == 200 && strings.Contains(string(b), "running") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sleep never started: %d %s", code, b)
		}
	}
	p.send("\x03")
	// An interactive shell drops the rest of an interrupted line, so the
	// status is asked for on the next one.
	p.send("echo after-$?\n")
	p.waitFor(p.waitFor(mark, "after-$?"), "after-130")

	p.send("exit 7\n")
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Fatal("stream did not end after exit")
	}
	p.mu.Lock()
	exit := p.exit
	p.mu.Unlock()
	if exit["type"] != "exit" || exit["exit_code"] != float64(7) {
		t.Fatalf("last message %v, want exit with exit_code 7", exit)
	}

	t.Run("tickets", func(t *testing.T) {
		var tk struct {
			Ticket string `json:"ticket"`
			URL    string `json:"url"`
		}
		code, _, b := e.do("dev", "POST", "/api/v1/sandboxes/"+id+"/exec/stream/tickets", nil)
		if code != 201 || json.Unmarshal(b, &tk) != nil || !strings.HasPrefix(tk.Ticket, "sbx_wst_") {
			t.Fatalf("mint ticket: %d %s", code, b)
		}
		p, _, err := e.dialPty(t, id, "command=echo+ticketed&ticket="+url.QueryEscape(tk.Ticket), nil)
		if err != nil {
			t.Fatalf("dial with ticket: %v", err)
		}
		<-p.done
		if !strings.Contains(p.out.String(), "ticketed") || p.exit["exit_code"] != float64(0) {
			t.Fatalf("ticketed stream: output %q exit %v", p.out.String(), p.exit)
		}
		// Used once: refused the second time, before any upgrade.
		if _, resp, err := e.dialPty(t, id, "ticket="+url.QueryEscape(tk.Ticket), nil); err == nil || resp == nil || resp.StatusCode != 401 {
			t.Fatalf("reused ticket: err %v, status %v; want 401", err, resp)
		}
		// Bound to its sandbox.
		other := e.createReady(t)
		if code, _, b = e.do("dev", "POST", "/api/v1/sandboxes/"+id+"/exec/stream/tickets", nil); code != 201 || json.Unmarshal(b, &tk) != nil {
			t.Fatalf("mint ticket: %d %s", code, b)
		}
		if _, resp, err := e.dialPty(t, other, "ticket="+url.QueryEscape(tk.Ticket), nil); err == nil || resp == nil || resp.StatusCode != 401 {
			t.Fatalf("ticket for another sandbox: err %v, status %v; want 401", err, resp)
		}
		// Not another account's sandbox.
		if code, _, b := e.do("other", "POST", "/api/v1/sandboxes/"+id+"/exec/stream/tickets", nil); code != 404 {
			t.Fatalf("other account mints for dev's sandbox: %d %s", code, b)
		}
	})

	t.Run("origins", func(t *testing.T) {
		for _, c := range []struct {
			origin string
			ok     bool
		}{{"http://evil.example", false}, {"https://app.example.com", true}} {
			hdr := bearerHdr.Clone()
			hdr.Set("Origin", c.origin)
			p, resp, err := e.dialPty(t, id, "command=true", hdr)
			if c.ok != (err == nil) {
				t.Fatalf("origin %s: err %v (status %v), want allowed=%v", c.origin, err, resp, c.ok)
			}
			if c.ok {
				<-p.done
			} else if resp.StatusCode != 403 {
				t.Fatalf("origin %s: status %d, want 403", c.origin, resp.StatusCode)
			}
		}
	})
}

// TestPtyStreamInChromium opens the terminal stream from a page in headless
// Chromium with a ticket (a browser cannot send the bearer header), types
// a command and reads its output and exit message.
func TestPtyStreamInChromium(t *testing.T) {
	t.Parallel()
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<!doctype html><html><body><pre id="out"></pre><script>
window.runTerminal = (url) => new Promise((resolve) => {
  const out = [];
  const ws = new WebSocket(url);
  ws.binaryType = "arraybuffer";
  ws.onopen = () => ws.send(new TextEncoder().encode("echo from-$((40+2))-browser; exit 3\n"));
  ws.onmessage = (m) => {
    if (typeof m.data === "string") { out.push("EXIT " + m.data); return; }
    out.push(new TextDecoder().decode(m.data));
  };
  ws.onclose = (ev) => resolve(out.join("") + " CLOSE " + ev.code);
});
</script></body></html>`)
	}))
	t.Cleanup(page.Close)
	pageHost := strings.TrimPrefix(page.URL, "http://")
	e := newEnv(t, "sqlite", false, func(c *control.Config) { c.StreamOrigins = []string{pageHost} })
	id := e.createReady(t)

	// A hang detector for the browser's start, the page and the session:
	// the whole test took 30-38 s in -race runs of this package at load
	// 30, and overran 90 s in a whole-tree make race.
	ctx := chromiumtest.New(t, 5*time.Minute)
	if _, err := chromedp.Run(ctx, chromedp.Navigate(page.URL)); err != nil {
		t.Fatal(err)
	}
	// The ticket is minted once the browser is up: it is good for 30 s,
	// and a browser starting under a loaded race run took longer than
	// that (the socket then closed 1006 on the refused handshake).
	code, _, b := e.do("dev", "POST", "/api/v1/sandboxes/"+id+"/exec/stream/tickets", nil)
	var tk struct{ URL string }
	if code != 201 || json.Unmarshal(b, &tk) != nil {
		t.Fatalf("mint ticket: %d %s", code, b)
	}
	wsURL := strings.Replace(e.svc.URL(), "http://", "ws://", 1) + tk.URL + "&command=sh"
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf("window.runTerminal(%q)", wsURL), chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "from-42-browser") || !strings.Contains(got, `EXIT {"type":"exit","exit_code":3`) || !strings.HasSuffix(got, "CLOSE 1000") {
		t.Fatalf("browser saw %q; want the command's output, exit_code 3 and a normal close", got)
	}
}

// TestNoTicketForAnEndedSandbox: a sandbox that has ended gets no stream
// ticket (409 sandbox_state, as an SSH credential), rather than a 201
// for a ticket that can only fail when used.
func TestNoTicketForAnEndedSandbox(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", true)
	sb := e.createDev()
	if code, _, b := e.do("dev", "DELETE", "/api/v1/sandboxes/"+sb.ID, nil); code != 200 {
		t.Fatalf("delete: %d %s", code, b)
	}
	code, _, b := e.do("dev", "POST", "/api/v1/sandboxes/"+sb.ID+"/exec/stream/tickets", nil)
	var p problemDoc
	if code != 409 || json.Unmarshal(b, &p) != nil || p.Code != "sandbox_state" || strings.Contains(string(b), "sbx_wst_") {
		t.Fatalf("ticket for a deleted sandbox: %d %s, want 409 sandbox_state", code, b)
	}
}
