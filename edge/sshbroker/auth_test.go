package sshbroker

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbxedge/sbx/internal/testkit/sshscenario"
	"github.com/sbxedge/sbx/internal/testkit/waitfor"
	"golang.org/x/crypto/ssh"
)

func TestRefusals(t *testing.T) {
	e := newEnv(t, nil)
	live := e.grant("alpha", nil)
	expired := e.grant("alpha", ErrExpired)
	ended := e.grant("gone", ErrSandboxEnded)
	betaKey := e.grant("beta", nil)
	stranger := e.newKey("stranger")
	cases := []struct {
		name    string
		k       key
		user    string
		opts    []string
		wantMsg string // must appear in stderr; "" means no sbx: message at all
	}{
		{"expired credential", expired, "alpha", nil, "has expired"},
		{"sandbox ended", ended, "gone", nil, "has ended"},
		{"key of beta used for alpha", betaKey, "alpha", nil, ""},
		{"unknown key", stranger, "alpha", nil, ""},
		{"unknown user", live, "nosuchsandbox", nil, ""},
		{"malformed user", live, "al/pha", nil, ""},
		{"password auth", live, "alpha", []string{"-o", "PubkeyAuthentication=no", "-o", "PreferredAuthentications=password,keyboard-interactive"}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := run(t, e.ssh(testCtx(t, sshCeiling), c.k, c.user, c.opts, "echo in"), nil)
			if r.code != 255 || strings.Contains(r.stdout, "in") || !strings.Contains(r.stderr, "Permission denied") {
				t.Fatalf("got code %d stdout %q stderr %q, want 255 and Permission denied", r.code, r.stdout, r.stderr)
			}
			if c.wantMsg == "" && strings.Contains(r.stderr, "sbx:") {
				t.Fatalf("stderr %q tells an unauthorized client something", r.stderr)
			}
			if c.wantMsg != "" && !strings.Contains(r.stderr, c.wantMsg) {
				t.Fatalf("stderr %q, want the message %q", r.stderr, c.wantMsg)
			}
		})
	}
	// The live key still works: refusals did not poison anything.
	if r := run(t, e.ssh(testCtx(t, sshCeiling), live, "alpha", nil, "echo in"), nil); r.code != 0 {
		t.Fatalf("live key after refusals: code %d stderr %s", r.code, r.stderr)
	}
}

// TestQueryOneKeySignAnother is the CVE-2024-45337 shape, driven by real
// OpenSSH: the client offers key A (the server says it would accept it),
// cannot sign with it (the agent refuses: confirm constraint, no askpass),
// then signs with key B. The connection must carry B's rights only.
func TestQueryOneKeySignAnother(t *testing.T) {
	e := newEnv(t, nil)
	sock := filepath.Join(e.dir, "agent.sock")
	agent := exec.Command("ssh-agent", "-D", "-a", sock)
	agent.Env = append(os.Environ(), "SSH_ASKPASS=/bin/false", "SSH_ASKPASS_REQUIRE=force", "DISPLAY=:0")
	sshscenario.Background(t, agent)
	waitUnixSocket(t, sock)

	cases := []struct {
		name     string
		aRefusal error  // A's standing
		bRefusal error  // B's standing
		wantCode int    // of `echo in`
		wantMsg  string // in stderr
	}{
		{"A live, B expired: refused as B", nil, ErrExpired, 255, "has expired"},
		{"A expired, B live: admitted as B", ErrExpired, nil, 0, ""},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := e.grant("alpha", c.aRefusal)
			b := e.grant("alpha", c.bRefusal)
			// Route each key to a distinct sandbox ID so the activity hook
			// shows whose rights the connection got.
			e.auth.mu.Lock()
			ca, cb := e.auth.creds[a.fp], e.auth.creds[b.fp]
			ca.route.SandboxID, cb.route.SandboxID = "route-of-A", "route-of-B"
			e.auth.creds[a.fp], e.auth.creds[b.fp] = ca, cb
			e.auth.mu.Unlock()

			add := exec.Command("ssh-add", "-c", a.path)
			add.Env = append(os.Environ(), "SSH_AUTH_SOCK="+sock)
			if out, err := add.CombinedOutput(); err != nil {
				t.Fatalf("ssh-add -c: %v: %s", err, out)
			}
			args := e.sshArgs(b, "-v", "-o", "IdentityFile="+a.path+".pub", "-p", e.port, "alpha@127.0.0.1", "echo in")
			// -i B comes first in sshArgs; put A first so it is offered first.
			args = reorderIdentities(args, a.path+".pub", b.path)
			cmd := exec.CommandContext(testCtx(t, sshCeiling), "ssh", args...)
			cmd.Env = append(os.Environ(), "SSH_AUTH_SOCK="+sock)
			r := run(t, cmd, nil)
			if !strings.Contains(r.stderr, "Server accepts key: "+a.path) || !strings.Contains(r.stderr, "agent refused") {
				t.Fatalf("the client did not query A and fail to sign with it; stderr:\n%s", r.stderr)
			}
			if r.code != c.wantCode || (c.wantMsg != "" && !strings.Contains(r.stderr, c.wantMsg)) {
				t.Fatalf("got code %d, stderr:\n%s\nwant code %d and %q", r.code, r.stderr, c.wantCode, c.wantMsg)
			}
			e.act.mu.Lock()
			opened := append([]string(nil), e.act.opened...)
			e.act.mu.Unlock()
			for _, id := range opened {
				if id == "route-of-A" {
					t.Fatalf("a connection got A's route; opened %v", opened)
				}
			}
			if c.wantCode == 0 && (len(opened) != i || opened[len(opened)-1] != "route-of-B") {
				t.Fatalf("opened routes %v, want the last to be route-of-B", opened)
			}
			rm := exec.Command("ssh-add", "-D")
			rm.Env = append(os.Environ(), "SSH_AUTH_SOCK="+sock)
			rm.Run()
		})
	}
}

// reorderIdentities moves "-i second" after an "-o IdentityFile=first".
func reorderIdentities(args []string, first, second string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if args[i] == "-i" && i+1 < len(args) && args[i+1] == second {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return append([]string{"-o", "IdentityFile=" + first, "-o", "IdentityFile=" + second}, out...)
}

// limitedEnv is an env whose failed-auth buckets hold burst (per source
// and key) and sourceBurst (per source) and refill one token per 1,000 s:
// far longer than a test, so what a test counts does not depend on how
// fast the machine runs its steps (at 0.5/s, a 127.0.0.2 login slower
// than 2 s under -race refilled a token and a limited source was
// admitted).
func limitedEnv(t *testing.T, burst, sourceBurst int) *env {
	t.Helper()
	return newEnv(t, func(c *Config) {
		c.FailedAuthBurst, c.FailedAuthRate = burst, limitedRefill
		c.SourceFailedAuthBurst, c.SourceFailedAuthRate = sourceBurst, limitedRefill
	})
}

// limitedRefill is limitedEnv's refill rate, tokens a second.
const limitedRefill = 0.001

// TestFailedAuthRateLimit makes 1,000 failed attempts from 127.0.0.1 with
// the Go SSH client, then shows the broker still serves 127.0.0.2 (another
// source on loopback) with OpenSSH, while 127.0.0.1 is held off.
func TestFailedAuthRateLimit(t *testing.T) {
	e := limitedEnv(t, 20, 20)
	live := e.grant("alpha", nil)
	stranger := e.newKey("stranger")
	var refusedAtAuth, cutEarly atomic.Int64
	start := time.Now()
	for range 1000 {
		_, err := dialGo(e.addr, "127.0.0.1", "alpha", stranger.signer)
		switch {
		case err == nil:
			t.Fatal("unknown key was admitted")
		case strings.Contains(err.Error(), "unable to authenticate"):
			refusedAtAuth.Add(1)
		default:
			cutEarly.Add(1)
		}
	}
	elapsed := time.Since(start)
	// Each refused connection spends at least one token; allow the refill.
	maxAuth := int64(20 + limitedRefill*elapsed.Seconds() + 2)
	if refusedAtAuth.Load() > maxAuth || cutEarly.Load() < 900 {
		t.Fatalf("1000 attempts in %v: %d reached auth, %d cut before; want at most %d to reach auth", elapsed, refusedAtAuth.Load(), cutEarly.Load(), maxAuth)
	}
	t.Logf("1000 attempts in %v: %d reached auth, %d cut before key exchange", elapsed.Round(time.Millisecond), refusedAtAuth.Load(), cutEarly.Load())

	// Another source is unaffected, with the real client.
	r := run(t, e.ssh(testCtx(t, sshCeiling), live, "alpha", []string{"-b", "127.0.0.2"}, "echo fine"), nil)
	if r.code != 0 || r.stdout != "fine\n" {
		t.Fatalf("from 127.0.0.2: code %d stdout %q stderr %q, want fine", r.code, r.stdout, r.stderr)
	}
	// The source past its ceiling is held off even with a good key, until
	// it refills.
	if c, err := dialGo(e.addr, "127.0.0.1", "alpha", live.signer); err == nil {
		c.Close()
		t.Fatal("a rate-limited source was admitted")
	}
}

// TestFailedAuthSharedAddress: a client behind the same address (a NAT,
// an office) failing 3 times a second with a stale key does not shut out
// a holder of a valid key, 10 times of 10. Refill is all but off, so each
// round of 3 failures stands for a second of them whatever the machine's
// speed; per source address alone (the old limit) the first round locked
// the valid key out.
func TestFailedAuthSharedAddress(t *testing.T) {
	e := limitedEnv(t, 3, 100)
	live := e.grant("alpha", nil)
	stale := e.newKey("stale")
	admitted := 0
	for round := range 10 {
		for range 3 {
			if c, err := dialGo(e.addr, "127.0.0.1", "alpha", stale.signer); err == nil {
				c.Close()
				t.Fatal("unknown key was admitted")
			}
		}
		c, err := dialGo(e.addr, "127.0.0.1", "alpha", live.signer)
		if err != nil {
			t.Logf("round %d: valid key refused: %v", round, err)
			continue
		}
		c.Close()
		admitted++
	}
	if admitted != 10 {
		t.Fatalf("valid key admitted %d of 10 times beside 3 failures a second from the same address, want 10", admitted)
	}
	// The stale key itself is limited: past its burst it is refused
	// without being looked up.
	unknown := metricValue(t, e, "sbx_sshbroker_auth_failures_total", "unknown_key")
	limited := metricValue(t, e, "sbx_sshbroker_auth_failures_total", "rate_limited")
	if unknown > 3 || limited < 27 {
		t.Fatalf("30 stale-key tries: %v refused as unknown, %v as rate limited; want at most the burst of 3 judged, the rest limited", unknown, limited)
	}
}

// dialGo connects with the x/crypto client from a chosen source address.
func dialGo(addr, from, user string, signer ssh.Signer) (*ssh.Client, error) {
	d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	c, chans, reqs, err := ssh.NewClientConn(nc, addr, &ssh.ClientConfig{
		User:            user,
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey(), // the broker's key is not under test here
	})
	if err != nil {
		nc.Close()
		return nil, err
	}
	nc.SetDeadline(time.Time{})
	return ssh.NewClient(c, chans, reqs), nil
}

func TestHandshakeTimeout(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.HandshakeTimeout = 300 * time.Millisecond })
	nc, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// Send nothing: the broker must hang up on its own.
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 256)
	start := time.Now()
	for {
		if _, err = nc.Read(buf); err != nil {
			break
		}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("broker kept a silent client for %v", time.Since(start))
	}
}

// TestSlowUpstreamOutlastsHandshakeTimeout: a sandbox sshd slower to
// answer than what the client's handshake budget has left still gets its
// own budget (UpstreamDialTimeout) once the client proved its key.
func TestSlowUpstreamOutlastsHandshakeTimeout(t *testing.T) {
	const delay = 2 * time.Second
	e := newEnv(t, func(c *Config) {
		c.HandshakeTimeout = time.Second
		c.UpstreamDialTimeout = time.Minute
	})
	// A relay that holds each upstream connection for delay before
	// passing bytes: the sshd as it answers when fifty logins fork at once.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				time.Sleep(delay)
				up, err := net.Dial("tcp", e.up.Addr)
				if err != nil {
					return
				}
				defer up.Close()
				done := make(chan struct{})
				go func() { // ends when c or up closes
					defer close(done)
					_, _ = io.Copy(up, c)
					up.Close()
				}()
				_, _ = io.Copy(c, up)
				c.Close()
				<-done
			})
		}
	})
	k := e.grant("slow", nil)
	e.auth.update(k.fp, func(c *cred) { c.route.Addr = ln.Addr().String() })
	r := run(t, e.ssh(testCtx(t, sshCeiling), k, "slow", nil, "echo through"), nil)
	if r.code != 0 || r.stdout != "through\n" {
		t.Fatalf("code %d stdout %q stderr %q; want the session, %v upstream delay inside a %v dial budget", r.code, r.stdout, r.stderr, delay, time.Minute)
	}
}

// TestRefusedUsernameLogBounded: the username is the client's to pick, up
// to a packet's size; a refusal logs at most a valid name's length of it.
func TestRefusedUsernameLogBounded(t *testing.T) {
	var logs sshscenario.SyncBuffer
	e := newEnv(t, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	k := e.newKey("attacker")
	long := strings.Repeat("u", 20000)
	if c, err := dialGo(e.addr, "127.0.0.1", long, k.signer); err == nil {
		c.Close()
		t.Fatal("a 20000-byte username was admitted")
	}
	waitfor.Try(t, 5*time.Second, func() bool { return strings.Contains(logs.String(), "auth refused") })
	for _, line := range strings.Split(logs.String(), "\n") {
		if !strings.Contains(line, "auth refused") {
			continue
		}
		if len(line) > 1000 || !strings.Contains(line, "(20000 bytes)") {
			t.Fatalf("refusal logged in %d bytes, want the name cut with its length: %.300s", len(line), line)
		}
		return
	}
	t.Fatalf("no refusal logged: %q", logs.String())
}
