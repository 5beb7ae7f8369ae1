package simfleet_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/auth/hostkey"
	"github.com/sbxedge/sbx/auth/sshca"
	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/provider/providertest"
	"github.com/sbxedge/sbx/control/provider/simfleet"
	"github.com/sbxedge/sbx/internal/podssh"
	"github.com/sbxedge/sbx/internal/podtcp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// base hands each test its own /16 of loopback, so parallel packages'
// fleets (and a loadtest running beside) never share an address.
var base atomic.Uint32

func newFleet(t *testing.T) *simfleet.Fleet {
	t.Helper()
	n := base.Add(1)
	f, err := simfleet.New(simfleet.Config{Base: netip.AddrFrom4([4]byte{127, 91, byte(n), 1})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestConformance runs the provider suite. Everything in it applies but
// what the fleet is not: it is no Suspender, so suspend, restore and the
// workspace kept across them are skipped by the suite itself; "echo kept
// > file" exits 0 and writes nothing (there is no file system).
func TestConformance(t *testing.T) {
	providertest.Run(t, func(t *testing.T) providertest.Env {
		return providertest.Env{Provider: newFleet(t)}
	})
}

type kit struct {
	ca   *sshca.CA
	keys *hostkey.Deriver
}

func newKit(t *testing.T) kit {
	ca, _, err := sshca.Generate()
	if err != nil {
		t.Fatal(err)
	}
	keys, err := hostkey.New([]byte("simfleet-test-secret-0123456789ab"))
	if err != nil {
		t.Fatal(err)
	}
	return kit{ca: ca, keys: keys}
}

func (k kit) provision(ctx context.Context, t *testing.T, f *simfleet.Fleet, id string) (podssh.Target, provider.Endpoint) {
	t.Helper()
	priv, pub, err := k.keys.Key(id)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := f.Provision(ctx, provider.Spec{SandboxID: id, HostKeyPEM: priv, UserCAKey: k.ca.AuthorizedKey()})
	if err != nil {
		t.Fatal(err)
	}
	return podssh.Target{SandboxID: id, Addr: ep.Addr, ForwardAddr: ep.ForwardAddr, User: ep.User, HostKey: pub, Workspace: ep.Workspace}, ep
}

// TestManySandboxesEchoAndForward holds 300 sandboxes at once, each on
// its own address: a session echoes its keystrokes, exec prints, the
// forwarder reaches a loopback HTTP server as that sandbox, and a
// destroyed sandbox's address is free for the next.
func TestManySandboxesEchoAndForward(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	k := newKit(t)
	f := newFleet(t)
	pool := podssh.NewPool(k.ca, nil)
	defer pool.Close()

	app, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "app") }),
		ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(app)
	defer srv.Close()
	appPort := app.Addr().(*net.TCPAddr).Port

	const n = 300
	targets := make([]podssh.Target, n)
	seen := map[string]bool{}
	for i := range n {
		targets[i], _ = k.provision(ctx, t, f, fmt.Sprintf("sbx-sim-%d", i))
		if seen[targets[i].Addr] {
			t.Fatalf("address %s handed out twice", targets[i].Addr)
		}
		seen[targets[i].Addr] = true
	}
	if f.Len() != n {
		t.Fatalf("Len = %d, want %d", f.Len(), n)
	}
	dialer := &podtcp.Dialer{CA: k.ca, KeyID: "test-edge"}
	for i, tg := range targets {
		if i%30 != 0 {
			continue
		}
		res, err := pool.Exec(ctx, tg, podssh.ExecRequest{Command: "echo hello " + tg.SandboxID})
		if err != nil || res.ExitCode != 0 || string(res.Stdout) != "hello "+tg.SandboxID+"\n" {
			t.Fatalf("exec in %s: %+v, %v", tg.SandboxID, res, err)
		}
		if res, err := pool.Exec(ctx, tg, podssh.ExecRequest{Command: "false"}); err != nil || res.ExitCode != 1 {
			t.Fatalf("false in %s: %+v, %v; want exit 1", tg.SandboxID, res, err)
		}
		c, err := pool.Client(ctx, tg)
		if err != nil {
			t.Fatal(err)
		}
		s, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		in, _ := s.StdinPipe()
		out, _ := s.StdoutPipe()
		if err := s.RequestPty("xterm", 24, 80, ssh.TerminalModes{}); err != nil {
			t.Fatal(err)
		}
		if err := s.Shell(); err != nil {
			t.Fatal(err)
		}
		io.WriteString(in, "keys")
		buf := make([]byte, 4)
		if _, err := io.ReadFull(out, buf); err != nil || string(buf) != "keys" {
			t.Fatalf("shell echo in %s: %q, %v", tg.SandboxID, buf, err)
		}
		in.Close()
		if err := s.Wait(); err != nil {
			t.Fatalf("shell after EOF: %v; want exit 0", err)
		}

		conn, err := dialer.Dial(ctx, tg, appPort)
		if err != nil {
			t.Fatalf("forward to %s: %v", tg.SandboxID, err)
		}
		io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		b, _ := io.ReadAll(conn)
		conn.Close()
		if !strings.HasSuffix(string(b), "app") {
			t.Fatalf("app through %s's forwarder: %q", tg.SandboxID, b)
		}
	}

	// A certificate pinned to one sandbox's host key reaches no other.
	wrong := targets[1]
	wrong.HostKey = targets[2].HostKey
	if _, err := dialer.Dial(ctx, wrong, appPort); err == nil {
		t.Fatal("forwarder of sandbox 1 accepted sandbox 2's pinned key")
	}
	pool.Forget(targets[0].SandboxID)
	if err := f.Destroy(ctx, targets[0].SandboxID); err != nil {
		t.Fatal(err)
	}
	again, _ := k.provision(ctx, t, f, "sbx-sim-again")
	if again.Addr != targets[0].Addr {
		t.Errorf("new sandbox at %s; want the destroyed one's %s reused", again.Addr, targets[0].Addr)
	}
	for _, tg := range targets {
		pool.Forget(tg.SandboxID)
	}
}

// TestRefusesPlainKeysAndOtherUsers: the endpoint is as strict as a
// sandbox's sshd, so a load test through it exercises the real checks.
func TestRefusesPlainKeysAndOtherUsers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k := newKit(t)
	f := newFleet(t)
	tg, _ := k.provision(ctx, t, f, "sbx-strict")
	cert, err := k.ca.UserSigner("sbx", "test", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	other, err := k.ca.UserSigner("root", "test", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		user   string
		signer ssh.Signer
		ok     bool
	}{
		"certificate":       {"sbx", cert, true},
		"another principal": {"sbx", other, false},
		"another login":     {"root", other, false},
		"a plain key":       {"sbx", plain(t), false},
	} {
		cfg := &ssh.ClientConfig{User: c.user, Auth: []ssh.AuthMethod{ssh.PublicKeys(c.signer)},
			HostKeyCallback: ssh.InsecureIgnoreHostKey(), Timeout: 5 * time.Second}
		cl, err := ssh.Dial("tcp", tg.Addr, cfg)
		if (err == nil) != c.ok {
			t.Errorf("%s: err %v; want ok=%v", name, err, c.ok)
		}
		if cl != nil {
			cl.Close()
		}
	}
}

// plain returns a signer of a new key that no CA signed.
func plain(t *testing.T) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// pipes counts this process's open pipe descriptors.
func pipes(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "pipe:") {
			n++
		}
	}
	return n
}

// TestForwardedConnectionsHoldNoPipes: 50 connections held open through
// a sandbox's forwarder cost sockets only. A spliced copy would hold a
// kernel pipe per waiting direction (four descriptors a connection),
// which ran a 4,000-sandbox fleet out of descriptors at 2,000
// WebSockets.
func TestForwardedConnectionsHoldNoPipes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k := newKit(t)
	f := newFleet(t)
	tg, _ := k.provision(ctx, t, f, "sbx-pipes")
	app, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	go func() {
		for {
			c, err := app.Accept()
			if err != nil {
				return
			}
			// Not io.Copy(c, c), which would splice (and count) here.
			go func() { defer c.Close(); io.Copy(struct{ io.Writer }{c}, struct{ io.Reader }{c}) }()
		}
	}()
	dialer := &podtcp.Dialer{CA: k.ca, KeyID: "test-edge"}
	before := pipes(t)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 50 {
		c, err := dialer.Dial(ctx, tg, app.Addr().(*net.TCPAddr).Port)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		// A byte each way, so both copies have run and now wait.
		io.WriteString(c, "x")
		var b [1]byte
		if _, err := io.ReadFull(c, b[:]); err != nil {
			t.Fatal(err)
		}
	}
	if got := pipes(t) - before; got > 8 {
		t.Errorf("%d pipe descriptors for 50 held connections; want none (the copy is not spliced)", got)
	}
}
