package sshbroker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sbxedge/sbx/internal/testkit/sshscenario"
	"github.com/sbxedge/sbx/internal/testkit/waitfor"
	"golang.org/x/crypto/ssh"
)

func TestChannelCap(t *testing.T) {
	const limit = 8
	e := newEnv(t, func(c *Config) { c.MaxChannelsPerConn = limit })
	k := e.grant("alpha", nil)
	client, err := dialGo(e.addr, "127.0.0.1", "alpha", k.signer)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	var open []ssh.Channel
	refused := 0
	for range 10000 {
		ch, reqs, err := client.OpenChannel("session", nil)
		if err != nil {
			var oe *ssh.OpenChannelError
			if !errors.As(err, &oe) || oe.Reason != ssh.ResourceShortage {
				t.Fatalf("open refused with %v, want ResourceShortage", err)
			}
			refused++
			continue
		}
		go ssh.DiscardRequests(reqs)
		open = append(open, ch)
	}
	if len(open) != limit || refused != 10000-limit {
		t.Fatalf("10000 opens: got %d open, %d refused; want %d open", len(open), refused, limit)
	}
	// Closing one frees a slot, and the connection still works.
	open[0].Close()
	var s *ssh.Session
	if !waitfor.Try(t, 5*time.Second, func() bool { s, err = client.NewSession(); return err == nil }) {
		t.Fatalf("no slot after closing a channel: %v", err)
	}
	if out, err := s.Output("echo still-working"); err != nil || string(out) != "still-working\n" {
		t.Fatalf("exec after cap: %q, %v", out, err)
	}
	for _, ch := range open[1:] {
		ch.Close()
	}
}

func TestParallelSessions(t *testing.T) {
	// Fifty real sshd logins at once on a shared two-core CI machine can
	// take longer than the production upstream handshake budget (10 s);
	// what this test checks is that none of them is lost, not how fast
	// sshd forks, so the budget here is the session's own.
	e := newEnv(t, func(c *Config) {
		c.HandshakeTimeout = 2 * time.Minute
		c.UpstreamDialTimeout = 2 * time.Minute
	})
	targets := func(sandboxes int) []sshscenario.SSH {
		var fns []sshscenario.SSH
		for i := range sandboxes {
			name := fmt.Sprintf("par%d-%d", sandboxes, i)
			fns = append(fns, e.to(e.grant(name, nil), name))
		}
		return fns
	}
	t.Run("one sandbox", func(t *testing.T) { sshscenario.ParallelSessions(t, targets(1), 50) })
	t.Run("ten sandboxes", func(t *testing.T) { sshscenario.ParallelSessions(t, targets(10), 50) })
}

func TestConnsPerSandboxCap(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxConnsPerSandbox = 2 })
	k := e.grant("alpha", nil)
	var clients []*ssh.Client
	for range 2 {
		c, err := dialGo(e.addr, "127.0.0.1", "alpha", k.signer)
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	r := run(t, e.ssh(testCtx(t, sshCeiling), k, "alpha", nil, "true"), nil)
	if r.code != 255 || !strings.Contains(r.stderr, "already has 2 open SSH connections") {
		t.Fatalf("third connection: code %d stderr %q, want refusal with a message", r.code, r.stderr)
	}
	clients[0].Close()
	clients[1].Close()
	if !waitfor.Try(t, 5*time.Second, func() bool {
		r = run(t, e.ssh(testCtx(t, sshCeiling), k, "alpha", nil, "true"), nil)
		return r.code == 0
	}) {
		t.Fatalf("slots not released: %s", r.stderr)
	}
}

func TestShutdownDrainsThenTellsWhy(t *testing.T) {
	t.Run("finishes within drain", func(t *testing.T) {
		e := newEnv(t, nil)
		k := e.grant("alpha", nil)
		cmd := e.ssh(testCtx(t, sshCeiling), k, "alpha", nil, "sleep 1; echo finished")
		var out sshscenario.SyncBuffer
		cmd.Stdout = &out
		errb := sshscenario.Background(t, cmd)
		waitOpen(t, e, "alpha")
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := e.broker.Shutdown(ctx); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		errb.Wait(t, 20*time.Second)
		if out.String() != "finished\n" {
			t.Fatalf("drained session printed %q (stderr %q), want finished", out.String(), errb.Stderr.String())
		}
		if err := <-e.serveErr; !errors.Is(err, ErrServerClosed) {
			t.Fatalf("Serve: %v", err)
		}
		e.serveErr <- ErrServerClosed // for the cleanup
	})
	t.Run("cut after drain with a message", func(t *testing.T) {
		e := newEnv(t, func(c *Config) { c.DrainPeriod = 300 * time.Millisecond })
		k := e.grant("alpha", nil)
		cmd := e.ssh(testCtx(t, sshCeiling), k, "alpha", nil, "sleep 60")
		errb := sshscenario.Background(t, cmd)
		waitOpen(t, e, "alpha")
		start := time.Now()
		if err := e.broker.Shutdown(context.Background()); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		errb.Wait(t, 20*time.Second)
		if time.Since(start) > 10*time.Second || !strings.Contains(errb.Stderr.String(), "restarting") {
			t.Fatalf("after %v stderr %q, want the restart message", time.Since(start), errb.Stderr.String())
		}
		<-e.serveErr
		e.serveErr <- ErrServerClosed
	})
}

func TestDisconnectSandbox(t *testing.T) {
	e := newEnv(t, nil)
	k := e.grant("alpha", nil)
	other := e.grant("beta", nil)
	cmd := e.ssh(testCtx(t, sshCeiling), k, "alpha", []string{"-tt"}, "sleep 60")
	errb := sshscenario.Background(t, cmd)
	keep := e.ssh(testCtx(t, sshCeiling), other, "beta", nil, "sleep 3; echo beta-ok")
	var keepOut sshscenario.SyncBuffer
	keep.Stdout = &keepOut
	keepBg := sshscenario.Background(t, keep)
	waitOpen(t, e, "alpha")
	waitOpen(t, e, "beta")
	if n := e.broker.Disconnect("alpha", "sbx: sandbox alpha was deleted."); n != 1 {
		t.Fatalf("Disconnect closed %d connections, want 1", n)
	}
	errb.Wait(t, 20*time.Second)
	if !strings.Contains(errb.Stderr.String(), "sandbox alpha was deleted") {
		t.Fatalf("stderr %q, want the reason", errb.Stderr.String())
	}
	keepBg.Wait(t, 20*time.Second)
	if keepOut.String() != "beta-ok\n" {
		t.Fatalf("other sandbox's session printed %q, want beta-ok", keepOut.String())
	}
}

// waitOpen waits until the activity hook saw a connection to sandbox open.
func waitOpen(t *testing.T, e *env, sandbox string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		e.act.mu.Lock()
		n := e.act.open[sandbox]
		e.act.mu.Unlock()
		if n > 0 {
			time.Sleep(200 * time.Millisecond) // let the session request land
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no open connection to %s", sandbox)
}

func TestMetricsAndActivity(t *testing.T) {
	e := newEnv(t, nil)
	k := e.grant("alpha", nil)
	stranger := e.newKey("stranger")
	run(t, e.ssh(testCtx(t, sshCeiling), k, "alpha", nil, "head -c 100000 /dev/zero"), nil)
	run(t, e.ssh(testCtx(t, sshCeiling), stranger, "alpha", nil, "true"), nil)
	checks := []struct {
		name, label string
		min         float64
	}{
		{"sbx_sshbroker_handshakes_total", "ok", 1},
		{"sbx_sshbroker_auth_failures_total", "unknown_key", 1},
		{"sbx_sshbroker_relayed_bytes_total", "from_sandbox", 100000},
		{"sbx_sshbroker_upstream_dial_seconds", "", 1},
	}
	for _, c := range checks {
		if got := metricValue(t, e, c.name, c.label); got < c.min {
			t.Errorf("%s{%s} = %v, want >= %v", c.name, c.label, got, c.min)
		}
	}
	e.act.mu.Lock()
	defer e.act.mu.Unlock()
	if e.act.marks["alpha"] == 0 || e.act.open["alpha"] != 0 {
		t.Errorf("activity: marks %v open %v, want a mark and no open connection", e.act.marks, e.act.open)
	}
}

func TestLoadOrCreateHostKeysIsStable(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	first, err := LoadOrCreateHostKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	second, err := LoadOrCreateHostKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 1 || len(second) != 1 || string(first[0].PublicKey().Marshal()) != string(second[0].PublicKey().Marshal()) {
		t.Fatalf("host key changed between starts")
	}
	if fi, err := os.Stat(filepath.Join(dir, "ssh_host_ed25519_key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("private key file: %v, mode %v, want 0600", err, fi.Mode())
	}
}

func TestConfigValidate(t *testing.T) {
	ok := func() Config {
		c := DefaultConfig()
		_, s, _ := generateSigner()
		c.HostKeys = []ssh.Signer{s}
		c.Authorizer = &fakeAuthorizer{}
		c.CA = fakeCA{}
		return c
	}
	cases := []struct {
		name  string
		mut   func(*Config)
		field string // "" means valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"no host keys", func(c *Config) { c.HostKeys = nil }, "HostKeys"},
		{"no authorizer", func(c *Config) { c.Authorizer = nil }, "Authorizer"},
		{"no CA", func(c *Config) { c.CA = nil }, "CA"},
		{"zero handshake timeout", func(c *Config) { c.HandshakeTimeout = 0 }, "HandshakeTimeout"},
		{"zero auth tries", func(c *Config) { c.MaxAuthTries = 0 }, "MaxAuthTries"},
		{"zero rate", func(c *Config) { c.FailedAuthRate = 0 }, "FailedAuthRate"},
		{"zero channels", func(c *Config) { c.MaxChannelsPerConn = 0 }, "MaxChannelsPerConn"},
		{"zero conns", func(c *Config) { c.MaxConnsPerSandbox = 0 }, "MaxConnsPerSandbox"},
		{"negative drain", func(c *Config) { c.DrainPeriod = -1 }, "DrainPeriod"},
		{"cache off", func(c *Config) { c.AuthCacheTTL, c.AuthRefusalTTL, c.AuthCacheSize = 0, 0, 0 }, ""},
		{"cache without size", func(c *Config) { c.AuthCacheSize = 0 }, "AuthCacheSize"},
		{"negative cache ttl", func(c *Config) { c.AuthCacheTTL = -1 }, "AuthCacheTTL"},
		{"keepalives off", func(c *Config) { c.ClientAliveInterval, c.UpstreamAliveInterval = 0, 0 }, ""},
		{"client keepalive without count", func(c *Config) { c.ClientAliveCountMax = 0 }, "ClientAliveCountMax"},
		{"upstream keepalive without count", func(c *Config) { c.UpstreamAliveCountMax = 0 }, "UpstreamAliveCountMax"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := ok()
			tc.mut(&c)
			err := c.Validate()
			if tc.field == "" && err != nil || tc.field != "" && (err == nil || !strings.Contains(err.Error(), tc.field)) {
				t.Fatalf("Validate() = %v, want an error naming %q", err, tc.field)
			}
		})
	}
}

// metricValue sums the samples of name whose single label has value label
// (any when label is ""); histograms count observations.
func metricValue(t *testing.T, e *env, name, label string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label != "" && (len(m.GetLabel()) != 1 || m.GetLabel()[0].GetValue() != label) {
				continue
			}
			sum += m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}
