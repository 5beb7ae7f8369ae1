package podssh_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/auth/sshca"
	"github.com/sbxedge/sbx/internal/podssh"
)

func testPool(t *testing.T, ctx context.Context, sb *sandbox) {

	t.Run("pinned host key mismatch refused", func(t *testing.T) {
		_, other, err := sshca.GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		bad := sb.target
		bad.SandboxID = "impostor"
		bad.HostKey = string(ssh.MarshalAuthorizedKey(other.PublicKey()))
		_, err = sb.pool.Client(ctx, bad)
		var mm *podssh.HostKeyMismatchError
		if !errors.As(err, &mm) || mm.SandboxID != "impostor" {
			t.Fatalf("Client with wrong pinned key = %v, want HostKeyMismatchError naming the sandbox", err)
		}
	})

	t.Run("certificate from another CA refused", func(t *testing.T) {
		otherCA, _, err := sshca.Generate()
		if err != nil {
			t.Fatal(err)
		}
		p := podssh.NewPool(otherCA, nil)
		defer p.Close()
		if _, err := p.Client(ctx, sb.target); err == nil {
			t.Fatal("connection with a foreign CA's certificate succeeded")
		}
	})

	t.Run("certificate for another principal refused", func(t *testing.T) {
		for _, principal := range []string{"nobody", ""} {
			signer, err := sb.ca.UserSigner(principal, "test", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if err := dialRaw(sb.target, signer); err == nil {
				t.Errorf("login as %s with a certificate for %q succeeded", sb.target.User, principal)
			}
		}
	})

	t.Run("plain key refused", func(t *testing.T) {
		_, signer, err := sshca.GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		if err := dialRaw(sb.target, signer); err == nil {
			t.Error("login with a plain key succeeded")
		}
	})

	t.Run("concurrent callers share one dial", func(t *testing.T) {
		sb.pool.Forget(sb.target.SandboxID)
		var wg sync.WaitGroup
		clients := make([]*ssh.Client, 20)
		for i := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := sb.pool.Client(ctx, sb.target)
				if err != nil {
					t.Error(err)
				}
				clients[i] = c
			}()
		}
		wg.Wait()
		for _, c := range clients[1:] {
			if c != clients[0] {
				t.Fatal("concurrent callers got different connections")
			}
		}
	})

	t.Run("broken connection redialled", func(t *testing.T) {
		c1, err := sb.pool.Client(ctx, sb.target)
		if err != nil {
			t.Fatal(err)
		}
		c1.Close() // as if the network dropped it
		// Exec retries a session that could not open on a dead client.
		res, err := sb.pool.Exec(ctx, sb.target, podssh.ExecRequest{Command: "echo ok"})
		if err != nil || string(res.Stdout) != "ok\n" {
			t.Fatalf("Exec after drop = %q, %v", res.Stdout, err)
		}
		c2, err := sb.pool.Client(ctx, sb.target)
		if err != nil || c2 == c1 {
			t.Fatalf("Client after drop = same %v, err %v; want a new connection", c2 == c1, err)
		}
	})

	t.Run("moved target: the old connection closed, the new one kept", func(t *testing.T) {
		c1, err := sb.pool.Client(ctx, sb.target)
		if err != nil {
			t.Fatal(err)
		}
		moved := sb.target
		_, port, _ := net.SplitHostPort(moved.Addr)
		moved.Addr = net.JoinHostPort("localhost", port) // same server, another target
		c2, err := sb.pool.Client(ctx, moved)
		if err != nil || c2 == c1 {
			t.Fatalf("Client for the moved target = same %v, err %v; want a new connection", c2 == c1, err)
		}
		waitClosed(t, c1, "the old target's connection is still open")
		s, err := c2.NewSession()
		if err != nil {
			t.Fatalf("the new target's connection was closed with the old one: %v", err)
		}
		s.Close()
		sb.pool.Forget(moved.SandboxID)
	})

	t.Run("connections per sandbox taken in turn, forgotten together", func(t *testing.T) {
		const n = 3
		p := podssh.NewPool(sb.ca, testLogger(t), podssh.WithConnsPerSandbox(n))
		defer p.Close()
		seen := map[*ssh.Client]int{}
		var order []*ssh.Client
		for range 2 * n {
			c, err := p.Client(ctx, sb.target)
			if err != nil {
				t.Fatal(err)
			}
			seen[c]++
			order = append(order, c)
		}
		if len(seen) != n {
			t.Fatalf("%d calls used %d connections, want %d", 2*n, len(seen), n)
		}
		for i := range n {
			if order[i] != order[i+n] {
				t.Fatalf("call %d and call %d used different connections: not in turn", i, i+n)
			}
		}
		// Exec runs on one of them.
		res, err := p.Exec(ctx, sb.target, podssh.ExecRequest{Command: "echo ok"})
		if err != nil || string(res.Stdout) != "ok\n" {
			t.Fatalf("Exec = %q, %v", res.Stdout, err)
		}
		p.Forget(sb.target.SandboxID)
		for c := range seen {
			waitClosed(t, c, "a forgotten connection is still open")
		}
	})

	t.Run("attached lives and dies with the connection", func(t *testing.T) {
		type key struct{}
		var opened []*closeCounter
		open := func(_ context.Context, c *ssh.Client) (io.Closer, error) {
			v := &closeCounter{client: c}
			opened = append(opened, v)
			return v, nil
		}
		a, err := sb.pool.Attached(ctx, sb.target, key{}, open)
		if err != nil {
			t.Fatal(err)
		}
		if b, err := sb.pool.Attached(ctx, sb.target, key{}, open); err != nil || b != a || len(opened) != 1 {
			t.Fatalf("second Attached = %v, %v after %d opens; want the kept one, opened once", b, err, len(opened))
		}
		sb.pool.Forget(sb.target.SandboxID)
		if n := opened[0].closed.Load(); n != 1 {
			t.Fatalf("forgotten connection's attachment closed %d times, want 1", n)
		}
		c, err := sb.pool.Attached(ctx, sb.target, key{}, open)
		if err != nil {
			t.Fatal(err)
		}
		if c == a || len(opened) != 2 || opened[1].client == opened[0].client {
			t.Fatal("Attached after Forget did not open afresh on a new connection")
		}
		wantErr := errors.New("no such subsystem")
		_, err = sb.pool.Attached(ctx, sb.target, struct{ key }{}, func(context.Context, *ssh.Client) (io.Closer, error) { return nil, wantErr })
		if !errors.Is(err, wantErr) {
			t.Fatalf("failed open = %v, want it wrapped", err)
		}
	})

	t.Run("forget closes", func(t *testing.T) {
		c1, err := sb.pool.Client(ctx, sb.target)
		if err != nil {
			t.Fatal(err)
		}
		sb.pool.Forget(sb.target.SandboxID)
		waitClosed(t, c1, "forgotten connection still open")
	})
}

func TestPoolClosed(t *testing.T) {
	ca, _, err := sshca.Generate()
	if err != nil {
		t.Fatal(err)
	}
	p := podssh.NewPool(ca, nil)
	p.Close()
	if _, err := p.Client(context.Background(), podssh.Target{SandboxID: "x"}); !errors.Is(err, podssh.ErrPoolClosed) {
		t.Fatalf("Client after Close = %v, want ErrPoolClosed", err)
	}
}

// dialRaw logs in to target with signer, bypassing the pool.
// waitClosed fails the test with msg unless c's connection ends within
// five seconds.
// closeCounter is an attachment that counts its closes.
type closeCounter struct {
	client *ssh.Client
	closed atomic.Int32
}

func (c *closeCounter) Close() error { c.closed.Add(1); return nil }

func waitClosed(t *testing.T, c *ssh.Client, msg string) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal(msg)
	}
}

func dialRaw(target podssh.Target, signer ssh.Signer) error {
	hk, _, _, _, err := ssh.ParseAuthorizedKey([]byte(target.HostKey))
	if err != nil {
		return err
	}
	c, err := ssh.Dial("tcp", target.Addr, &ssh.ClientConfig{
		User: target.User, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.FixedHostKey(hk), Timeout: 5 * time.Second,
	})
	if err != nil {
		return err
	}
	return c.Close()
}
