package api_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control"
)

// verifyWebhook is the README's Go snippet, word for word
// (TestReadmeWebhookSnippet holds them together): how a receiver checks
// a delivery from sbx.
//
// --- README snippet start ---
// verifyWebhook checks a delivery from sbx (Standard Webhooks). secret is
// the "whsec_..." value POST /api/v1/webhooks returned once; body is the
// raw request body, read before any JSON decoding.
func verifyWebhook(secret string, h http.Header, body []byte) error {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return err
	}
	id, ts := h.Get("webhook-id"), h.Get("webhook-timestamp")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || math.Abs(time.Since(time.Unix(sec, 0)).Seconds()) > 300 {
		return errors.New("missing or stale webhook-timestamp")
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	for _, sig := range strings.Fields(h.Get("webhook-signature")) {
		if hmac.Equal([]byte(sig), []byte(want)) {
			return nil
		}
	}
	return errors.New("bad webhook signature")
}

// --- README snippet end ---

// TestReadmeWebhookSnippet: the verification the README documents is the
// one the webhook test runs.
func TestReadmeWebhookSnippet(t *testing.T) {
	src, err := os.ReadFile("webhooks_test.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(src), "// --- README snippet start ---\n")
	snippet, _, _ := strings.Cut(rest, "\n// --- README snippet end ---")
	var lines []string
	for l := range strings.SplitSeq(strings.TrimSpace(snippet), "\n") {
		lines = append(lines, l)
	}
	want := strings.Join(lines, "\n")
	if want == "" || !strings.Contains(string(readme), want) {
		t.Fatalf("README.md does not carry verifyWebhook as the test runs it:\n%s", want)
	}
}

// loopbackOnly dials loopback only. Asked for anything else, it fails
// the test without sending a packet; a name fails it too, since the
// delivery must dial only the address it checked.
type loopbackOnly struct{ t testing.TB }

func (d loopbackOnly) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		d.t.Errorf("webhook delivery dialed %q, not an IP address and port", address)
		return nil, errors.New("guard: not an address")
	}
	if !ap.Addr().Unmap().IsLoopback() {
		d.t.Errorf("webhook delivery dialed %s, outside loopback", address)
		return nil, errors.New("guard: refused outside loopback")
	}
	return (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, address)
}

// answers resolves names from a table: each lookup of a name takes its
// next answer, the last one repeating.
type answers struct {
	mu sync.Mutex
	m  map[string][]string
	n  map[string]int
}

func (r *answers) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	list, ok := r.m[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	i := min(r.n[host], len(list)-1)
	r.n[host]++
	return []netip.Addr{netip.MustParseAddr(list[i])}, nil
}

// receiver is a webhook receiver on 127.0.0.1 that verifies every
// delivery with verifyWebhook and fails its first `fail` requests.
type receiver struct {
	t      testing.TB
	srv    *httptest.Server
	mu     sync.Mutex
	secret string
	fail   int
	got    []received
}

type received struct {
	header http.Header
	body   []byte
	msg    struct {
		ID        string `json:"id"`
		Type      string `json:"type"`
		AccountID string `json:"account_id"`
		Data      struct {
			SandboxID    string          `json:"sandbox_id"`
			State        string          `json:"state"`
			Profile      string          `json:"profile"`
			Provider     string          `json:"provider"`
			Host         string          `json:"host"`
			Consumer     map[string]any  `json:"consumer"`
			Reachability *map[string]any `json:"reachability"`
			DurationS    *float64        `json:"duration_s"`
			Cleanup      *map[string]any `json:"cleanup"`
		} `json:"data"`
	}
}

func newReceiver(t testing.TB, fail int) *receiver {
	r := &receiver{t: t, fail: fail}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := verifyWebhook(r.secret, req.Header, body); err != nil {
		r.t.Errorf("delivery %s failed verification: %v", req.Header.Get("webhook-id"), err)
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	if r.fail > 0 {
		r.fail--
		http.Error(w, "not now", http.StatusServiceUnavailable)
		return
	}
	rec := received{header: req.Header.Clone(), body: body}
	if err := json.Unmarshal(body, &rec.msg); err != nil {
		r.t.Errorf("delivery body %s: %v", body, err)
	}
	r.got = append(r.got, rec)
	w.WriteHeader(http.StatusOK)
}

func (r *receiver) setSecret(s string) {
	r.mu.Lock()
	r.secret = s
	r.mu.Unlock()
}

// waitTypes waits until the receiver has n deliveries and returns their
// types in arrival order.
func (r *receiver) waitTypes(n int) []received {
	r.t.Helper()
	end := time.Now().Add(time.Minute)
	for {
		r.mu.Lock()
		got := slices.Clone(r.got)
		r.mu.Unlock()
		if len(got) >= n {
			return got
		}
		if time.Now().After(end) {
			r.t.Fatalf("receiver got %d deliveries in a minute, want %d", len(got), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type webhookDoc struct {
	ID     string   `json:"id"`
	URL    string   `json:"url"`
	Events []string `json:"events"`
	Secret *string  `json:"secret"`
}

type deliveryDoc struct {
	ID             string  `json:"id"`
	EventID        string  `json:"event_id"`
	EventType      string  `json:"event_type"`
	Status         string  `json:"status"`
	Attempts       int     `json:"attempts"`
	LastStatusCode *int    `json:"last_status_code"`
	LastError      string  `json:"last_error"`
	NextRetryAt    *string `json:"next_retry_at"`
}

// TestWebhooks: a receiver on 127.0.0.1, trusted, verifies every delivery
// with the README's snippet and sees each transition of one sandbox's
// life in order, though it fails the first two requests (the first
// delivery then succeeds on its third attempt, as its log says, and the
// rest wait for it); a redelivery sends the same message again. Loopback
// that is not trusted, the metadata endpoint, RFC 1918 and CGNAT are
// refused at create, and a name that resolves to the metadata endpoint
// only at delivery is refused at dial, with no packet sent.
func TestWebhooks(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			testWebhooks(t, backend)
		})
	}
}

func testWebhooks(t *testing.T, backend string) {
	rcv := newReceiver(t, 2)
	dns := &answers{m: map[string][]string{
		"private.test": {"10.9.8.7"},
		"rebind.test":  {"93.184.216.34", "169.254.169.254"},
	}, n: map[string]int{}}
	e := newEnv(t, backend, false, func(c *control.Config) {
		c.Webhook.Trust = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
		c.Webhook.Retry = []time.Duration{50 * time.Millisecond, 50 * time.Millisecond, 50 * time.Millisecond}
		c.Webhook.OrderWait = 20 * time.Millisecond
		c.WebhookDialer = loopbackOnly{t}
		c.WebhookResolver = dns
	})

	_, port, _ := net.SplitHostPort(rcv.srv.Listener.Addr().String())
	for _, c := range []struct{ url, field, says string }{
		{"http://[::1]:" + port + "/hook", "url", "loopback"},
		{"http://127.0.0.2:" + port + "/hook", "url", "loopback"},
		{"http://169.254.169.254/latest/meta-data", "url", "cloud metadata endpoint"},
		{"https://10.1.2.3/hook", "url", "RFC 1918"},
		{"https://172.16.0.1/hook", "url", "RFC 1918"},
		{"https://192.168.1.1/hook", "url", "RFC 1918"},
		{"https://100.64.0.1/hook", "url", "carrier-grade NAT"},
		{"https://private.test/hook", "url", "RFC 1918"},
		{"https://user:pw@example.test/hook", "url", "credentials"},
		{"ftp://example.test/hook", "url", "http(s)"},
		{rcv.srv.URL + "/nope", "events", "sandbox.*"},
	} {
		events := `["sandbox.*"]`
		if c.field == "events" {
			events = `["sandbox.created"]`
		}
		var p struct {
			Detail string `json:"detail"`
			Errors []struct {
				Field string `json:"field"`
			} `json:"errors"`
		}
		_ = json.Unmarshal(e.send("dev", "POST", "/api/v1/webhooks", fmt.Sprintf(`{"url":%q,"events":%s}`, c.url, events), 422, nil), &p)
		if len(p.Errors) != 1 || p.Errors[0].Field != c.field || !strings.Contains(p.Detail, c.says) {
			t.Errorf("create %s %s: %+v, want a 422 on %s saying %q", c.url, events, p, c.field, c.says)
		}
	}

	var hook, rebind webhookDoc
	e.send("dev", "POST", "/api/v1/webhooks", fmt.Sprintf(`{"url":%q,"events":["sandbox.*"]}`, rcv.srv.URL+"/hook"), 201, &hook)
	if hook.Secret == nil || !strings.HasPrefix(*hook.Secret, "whsec_") {
		t.Fatalf("create answered %+v, want the whsec_ secret", hook)
	}
	rcv.setSecret(*hook.Secret)
	e.send("dev", "POST", "/api/v1/webhooks", `{"url":"https://rebind.test/hook","events":["sandbox.ready"]}`, 201, &rebind)

	var list struct {
		Webhooks []map[string]any `json:"webhooks"`
	}
	e.send("dev", "GET", "/api/v1/webhooks", "", 200, &list)
	if len(list.Webhooks) != 2 {
		t.Fatalf("list: %v, want both webhooks", list.Webhooks)
	}
	for _, w := range list.Webhooks {
		if _, ok := w["secret"]; ok {
			t.Errorf("list shows a secret: %v", w)
		}
	}
	e.send("other", "GET", "/api/v1/webhooks/"+hook.ID+"/deliveries", "", 404, nil)

	var sb sbView
	e.send("dev", "POST", "/api/v1/sandboxes", `{"profile":"tuist-linux-small","consumer":{"actor":"automation","project":"hive","run_id":"r-1"}}`, 201, &sb)
	e.waitStatus(sb.ID, "ready")
	if code, _, b := e.do("dev", "POST", "/api/v1/sandboxes/"+sb.ID+"/suspend", nil); code != http.StatusAccepted && code != http.StatusOK {
		t.Fatalf("suspend: %d %s, want 202 or 200", code, b)
	}
	e.waitStatus(sb.ID, "suspended")
	e.send("dev", "POST", "/api/v1/sandboxes/"+sb.ID+"/resume", "", 200, nil)
	e.send("dev", "DELETE", "/api/v1/sandboxes/"+sb.ID, "", 200, nil)
	e.waitStatus(sb.ID, "terminated")

	want := []string{"sandbox.pending", "sandbox.ready", "sandbox.suspending", "sandbox.suspended",
		"sandbox.restoring", "sandbox.ready", "sandbox.terminating", "sandbox.terminated"}
	got := rcv.waitTypes(len(want))
	var types []string
	for _, r := range got {
		types = append(types, r.msg.Type)
		d := r.msg.Data
		if r.msg.ID != r.header.Get("webhook-id") || d.SandboxID != sb.ID || r.msg.AccountID == "" ||
			d.Profile != "tuist-linux-small" || d.Provider != "local" || d.Host == "" || d.Consumer["run_id"] != "r-1" {
			t.Errorf("%s: %s, want its id, sandbox, account, profile, provider, host and consumer", r.msg.Type, r.body)
		}
		if (r.msg.Type == "sandbox.ready") != (d.Reachability != nil) {
			t.Errorf("%s: reachability %v, want it on sandbox.ready only", r.msg.Type, d.Reachability)
		}
		if r.msg.Type == "sandbox.terminated" && (d.DurationS == nil || *d.DurationS <= 0 || d.Cleanup == nil || (*d.Cleanup)["end_reason"] != "explicit_delete") {
			t.Errorf("sandbox.terminated: %s, want duration_s and a cleanup report", r.body)
		}
	}
	if !slices.Equal(types, want) {
		t.Fatalf("receiver saw %v, want %v", types, want)
	}

	var log struct {
		Deliveries []deliveryDoc `json:"deliveries"`
	}
	e.send("dev", "GET", "/api/v1/webhooks/"+hook.ID+"/deliveries", "", 200, &log)
	if len(log.Deliveries) != len(want) {
		t.Fatalf("delivery log has %d entries, want %d", len(log.Deliveries), len(want))
	}
	first := log.Deliveries[len(log.Deliveries)-1]
	if first.EventType != "sandbox.pending" || first.Status != "delivered" || first.Attempts != 3 ||
		first.LastStatusCode == nil || *first.LastStatusCode != 200 || first.EventID != got[0].msg.ID {
		t.Fatalf("first delivery's log: %+v, want sandbox.pending delivered on its 3rd attempt with 200", first)
	}

	// The name resolved to a public address at create and to the
	// metadata endpoint at delivery: refused at dial, every attempt.
	var rlog struct {
		Deliveries []deliveryDoc `json:"deliveries"`
	}
	end := time.Now().Add(30 * time.Second)
	for {
		e.send("dev", "GET", "/api/v1/webhooks/"+rebind.ID+"/deliveries", "", 200, &rlog)
		if len(rlog.Deliveries) == 2 && rlog.Deliveries[0].Status == "failed" && rlog.Deliveries[1].Status == "failed" {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("rebind deliveries: %+v, want two failed", rlog.Deliveries)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, d := range rlog.Deliveries {
		if d.Attempts != 4 || !strings.Contains(d.LastError, "169.254.169.254 is the cloud metadata endpoint") || d.LastStatusCode != nil || d.NextRetryAt != nil {
			t.Errorf("rebind delivery %+v, want 4 attempts refused at dial for the metadata endpoint", d)
		}
	}

	// Redelivery: the same message, signed afresh.
	e.send("dev", "POST", "/api/v1/webhooks/"+hook.ID+"/deliveries/"+first.ID+"/redeliver", "", 202, nil)
	again := rcv.waitTypes(len(want) + 1)[len(want)]
	if again.msg.ID != first.EventID || !bytes.Equal(again.body, got[0].body) {
		t.Errorf("redelivery sent %s, want message %s again", again.body, first.EventID)
	}
	checkOpenSSLSnippet(t, *hook.Secret, again)

	e.send("dev", "DELETE", "/api/v1/webhooks/"+hook.ID, "", 204, nil)
	e.send("dev", "DELETE", "/api/v1/webhooks/"+hook.ID, "", 404, nil)
	e.send("dev", "GET", "/api/v1/webhooks/"+hook.ID+"/deliveries", "", 404, nil)
}

// checkOpenSSLSnippet runs the README's shell verification on one
// delivery and wants the signature sent.
func checkOpenSSLSnippet(t *testing.T, secret string, r received) {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "<!-- webhook-openssl -->\n```sh\n")
	script, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("README.md has no openssl verification snippet")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "body.json"), r.body, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SECRET="+secret, "ID="+r.header.Get("webhook-id"), "TS="+r.header.Get("webhook-timestamp"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("README openssl snippet: %v: %s", err, out)
	}
	if got, sent := "v1,"+strings.TrimSpace(string(out)), r.header.Get("webhook-signature"); got != sent {
		t.Fatalf("README openssl snippet computes %q, delivery was signed %q", got, sent)
	}
}
