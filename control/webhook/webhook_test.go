package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/control/store/sqlite"
	"github.com/sbxedge/sbx/control/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestSignMatchesStandardWebhooks: the Standard Webhooks reference
// libraries' test vector.
func TestSignMatchesStandardWebhooks(t *testing.T) {
	key, err := DecodeSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	got := Sign(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("Sign = %q, want %q", got, want)
	}
}

func TestVerify(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	secret := EncodeSecret(key)
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"type":"sandbox.ready"}`)
	sig := Sign(key, "msg_1", now, body)
	ts := "1800000000"
	for _, c := range []struct {
		name, secret, id, ts, sigs string
		body                       []byte
		want                       error
	}{
		{"good", secret, "msg_1", ts, sig, body, nil},
		{"one of several", secret, "msg_1", ts, "v1,AAAA " + sig, body, nil},
		{"other body", secret, "msg_1", ts, sig, []byte(`{"type":"sandbox.failed"}`), ErrBadSignature},
		{"other id", secret, "msg_2", ts, sig, body, ErrBadSignature},
		{"other secret", EncodeSecret([]byte("another key")), "msg_1", ts, sig, body, ErrBadSignature},
		{"replayed later", secret, "msg_1", "1799999000", sig, body, ErrStale},
		{"no signature", secret, "msg_1", ts, "", body, ErrBadSignature},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := Verify(c.secret, c.id, c.ts, c.sigs, c.body, now, 5*time.Minute)
			if !errors.Is(err, c.want) {
				t.Errorf("Verify = %v, want %v", err, c.want)
			}
		})
	}
}

func TestPatterns(t *testing.T) {
	for _, ok := range [][]string{{"*"}, {"sandbox.*"}, {"sandbox.ready", "sandbox.terminated"}} {
		if err := CheckPatterns(ok); err != nil {
			t.Errorf("CheckPatterns(%v) = %v, want nil", ok, err)
		}
	}
	for _, bad := range [][]string{nil, {}, {"sandbox.created"}, {"sandbox"}, {"grant.*"}, {"sandbox.ready", "Sandbox.Ready"}} {
		err := CheckPatterns(bad)
		if err == nil || !strings.Contains(err.Error(), "sandbox.*") || !strings.Contains(err.Error(), "sandbox.terminated") {
			t.Errorf("CheckPatterns(%v) = %v, want an error naming the valid values", bad, err)
		}
	}
	if !Matches([]string{"sandbox.*"}, "sandbox.ready") || Matches([]string{"sandbox.ready"}, "sandbox.failed") || !Matches([]string{"*"}, "sandbox.failed") {
		t.Error("Matches disagrees with the patterns")
	}
}

// guard stands in for the network: it fails the test on any dial
// outside loopback (without sending a packet) and records the rest.
type guard struct {
	t      *testing.T
	mu     sync.Mutex
	dialed []string
}

func (g *guard) DialContext(_ context.Context, _, address string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(address)
	if err != nil || !ap.Addr().Unmap().IsLoopback() {
		g.t.Errorf("dialed %q, outside loopback", address)
		return nil, errors.New("guard: refused")
	}
	g.mu.Lock()
	g.dialed = append(g.dialed, address)
	g.mu.Unlock()
	return nil, errors.New("guard: loopback dial recorded, not made")
}

type table map[string][]string

func (tb table) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	list, ok := tb[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var out []netip.Addr
	for _, a := range list {
		out = append(out, netip.MustParseAddr(a))
	}
	return out, nil
}

// ownPort is this host's own server in the tests.
const ownPort = 8081

func newTestHub(t *testing.T, trust ...string) (*Hub, *guard) {
	t.Helper()
	g := &guard{t: t}
	cfg := Config{}
	for _, p := range trust {
		cfg.Trust = append(cfg.Trust, netip.MustParsePrefix(p))
	}
	h, err := New(cfg, Deps{Dialer: g, Resolver: table{
		"public.test":  {"93.184.216.34"},
		"private.test": {"10.0.0.7"},
		"mixed.test":   {"10.0.0.7", "93.184.216.34"},
		"meta.test":    {"169.254.169.254"},
		"local.test":   {"192.168.0.9", "127.0.0.1"},
	}, Own: func(port int) (string, bool) { return "sbx dev's own preview proxy", port == ownPort }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h, g
}

// TestCheckURL: what create accepts and refuses, with and without a
// trusted range. Nothing is dialed.
func TestCheckURL(t *testing.T) {
	for _, c := range []struct {
		url   string
		trust []string
		want  string // "" accepted, else a word of the refusal
	}{
		{"http://127.0.0.1:8080/hook", nil, "loopback"},
		{"https://127.0.0.1/hook", nil, "loopback"},
		{"http://127.0.0.1:8080/hook", []string{"127.0.0.1/32"}, ""},
		{"http://[::1]:8080/hook", []string{"127.0.0.1/32"}, "loopback"},
		{"http://[::1]:8080/hook", []string{"::1/128"}, ""},
		{"http://127.0.0.1:8081/hook", []string{"127.0.0.1/32"}, "own preview proxy"},
		{"http://169.254.169.254/latest/meta-data/", nil, "cloud metadata"},
		{"http://169.254.169.254/latest/meta-data/", []string{"127.0.0.0/8"}, "cloud metadata"},
		{"https://10.1.2.3/", nil, "RFC 1918"},
		{"https://172.20.0.1/", nil, "RFC 1918"},
		{"https://192.168.1.1/", nil, "RFC 1918"},
		{"https://100.64.0.1/", nil, "carrier-grade NAT"},
		{"https://[fd00:ec2::254]/", nil, "cloud metadata"},
		{"https://[64:ff9b::a00:1]/", nil, "NAT64"},
		{"https://private.test/", nil, "RFC 1918"},
		{"https://meta.test/", nil, "cloud metadata"},
		{"https://mixed.test/", nil, ""},
		{"https://public.test/hook", nil, ""},
		{"https://unknown.test/hook", nil, ""},
		{"http://public.test/hook", nil, "https"},
		{"http://93.184.216.34/hook", nil, "https"},
		{"https://u:p@public.test/hook", nil, "credentials"},
		{"https://public.test/hook#x", nil, "fragment"},
		{"ftp://public.test/", nil, "http(s)"},
		{"/relative", nil, "absolute"},
		{"https://public.test:0/", nil, "port"},
	} {
		h, _ := newTestHub(t, c.trust...)
		_, err := h.checkURL(t.Context(), c.url)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("checkURL(%s, trust %v) = %v, want accepted", c.url, c.trust, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("checkURL(%s, trust %v) = %v, want a refusal saying %q", c.url, c.trust, err, c.want)
		}
	}
}

// TestDialChecksEveryAddress: at delivery the name is resolved again and
// only a checked address is dialed; one resolving to refused addresses
// only is refused without a dial (the guard fails the test on any dial
// outside loopback).
func TestDialChecksEveryAddress(t *testing.T) {
	for _, c := range []struct {
		addr   string
		trust  []string
		dialed []string
		refuse string
	}{
		{"meta.test:443", nil, nil, "cloud metadata"},
		{"private.test:443", nil, nil, "RFC 1918"},
		{"169.254.169.254:80", []string{"127.0.0.0/8"}, nil, "cloud metadata"},
		{"127.0.0.1:8080", nil, nil, "loopback"},
		{"local.test:8080", []string{"127.0.0.1/32"}, []string{"127.0.0.1:8080"}, ""},
		{"127.0.0.1:8080", []string{"127.0.0.1/32"}, []string{"127.0.0.1:8080"}, ""},
		{"local.test:8081", []string{"127.0.0.1/32"}, nil, "own preview proxy"},
	} {
		h, g := newTestHub(t, c.trust...)
		_, err := h.dial(t.Context(), "tcp", c.addr)
		var te *TargetError
		if c.refuse != "" && (!errors.As(err, &te) || !strings.Contains(err.Error(), c.refuse)) {
			t.Errorf("dial %s: %v, want refused for %q", c.addr, err, c.refuse)
		}
		if c.refuse == "" && errors.As(err, &te) {
			t.Errorf("dial %s: refused (%v), want dialed", c.addr, err)
		}
		if strings.Join(g.dialed, ",") != strings.Join(c.dialed, ",") {
			t.Errorf("dial %s dialed %v, want %v", c.addr, g.dialed, c.dialed)
		}
	}
}

type fixedSecrets struct{}

func (fixedSecrets) Bytes(info string, n int) ([]byte, error) {
	return []byte(strings.Repeat("k", n)), nil
}

// TestStateEventInTransaction: a transition's deliveries are written in
// its transaction (rolled back with it), one per matching webhook.
func TestStateEventInTransaction(t *testing.T) {
	ctx := t.Context()
	s := storetest.Open(t, sqlite.Open, filepath.Join(t.TempDir(), "sbx.db"))
	h, err := New(Config{SSHHost: "ssh.example", SSHPort: 22, Provider: "local", Host: "box"}, Deps{Store: s, Secrets: fixedSecrets{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	now := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	sb := store.Sandbox{ID: "sbx-1", AccountID: "a", Profile: "small", Platform: "linux", State: store.StateReady,
		CreatedAt: now.Add(-time.Minute), DeadlineAt: now.Add(time.Hour), ReadyAt: &now, Workspace: "/workspace",
		Consumer: store.Consumer{Actor: "agent", RunID: "r-9"}}
	err = s.InTx(ctx, func(tx store.Tx) error {
		for _, step := range []func() error{
			func() error {
				return tx.UpsertAccount(ctx, store.Account{ID: "a", Name: "a", SandboxesEnabled: true, CreatedAt: now})
			},
			func() error { return tx.InsertSandbox(ctx, sb) },
			func() error {
				return tx.InsertWebhook(ctx, store.Webhook{ID: "wh-all", AccountID: "a", URL: "https://public.test/", Events: []string{"sandbox.*"}, CreatedAt: now})
			},
			func() error {
				return tx.InsertWebhook(ctx, store.Webhook{ID: "wh-end", AccountID: "a", URL: "https://public.test/", Events: []string{"sandbox.terminated"}, CreatedAt: now})
			},
		} {
			if err := step(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ev := store.Event{SandboxID: "sbx-1", AccountID: "a", Type: "state", State: store.StateReady, Actor: "provisioner", At: now}
	rollback := errors.New("transition failed later")
	err = s.InTx(ctx, func(tx store.Tx) error {
		if err := h.StateEvent(ctx, tx, ev); err != nil {
			return err
		}
		return rollback
	})
	if !errors.Is(err, rollback) {
		t.Fatalf("InTx = %v, want the rollback", err)
	}
	if got, _ := s.WebhookDeliveries(ctx, "wh-all", 0); len(got) != 0 {
		t.Fatalf("a rolled back transition left deliveries %+v", got)
	}

	if err := s.InTx(ctx, func(tx store.Tx) error { return h.StateEvent(ctx, tx, ev) }); err != nil {
		t.Fatal(err)
	}
	got, err := s.WebhookDeliveries(ctx, "wh-all", 0)
	if err != nil || len(got) != 1 {
		t.Fatalf("deliveries of wh-all: %+v %v, want one", got, err)
	}
	if end, _ := s.WebhookDeliveries(ctx, "wh-end", 0); len(end) != 0 {
		t.Errorf("wh-end (sandbox.terminated only) got %+v", end)
	}
	var msg Message
	if err := json.Unmarshal(got[0].Body, &msg); err != nil {
		t.Fatal(err)
	}
	if msg.ID != got[0].MessageID || msg.Type != "sandbox.ready" || msg.AccountID != "a" || msg.Data.Consumer.RunID != "r-9" ||
		msg.Data.Reachability == nil || msg.Data.Reachability.SSH != "sbx-1@ssh.example:22" || msg.Data.Provider != "local" || msg.Data.Host != "box" {
		t.Errorf("message %s, want sandbox.ready with reachability, consumer, provider and host", got[0].Body)
	}
	// Other events (grants, audit) are not transitions.
	if err := s.InTx(ctx, func(tx store.Tx) error {
		return h.StateEvent(ctx, tx, store.Event{SandboxID: "sbx-1", AccountID: "a", Type: "grant", At: now})
	}); err != nil {
		t.Fatal(err)
	}
	if again, _ := s.WebhookDeliveries(ctx, "wh-all", 0); len(again) != 1 {
		t.Errorf("a grant event made deliveries: %+v", again)
	}
}
