package podtcp_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/auth/sshca"
	"github.com/sbxedge/sbx/internal/podssh"
	"github.com/sbxedge/sbx/internal/podtcp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve runs a forwarder with keys on 127.0.0.1 until the test ends and
// returns its address.
func serve(t *testing.T, keys podtcp.Keys) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	f := &podtcp.Forwarder{Keys: func() (podtcp.Keys, error) { return keys, nil }}
	wg.Go(func() { _ = f.Serve(ctx, ln) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return ln.Addr().String()
}

// TestPinnedHostKey: the forwarder that holds the pinned host key opens
// the port; another sandbox's forwarder (an address that now belongs to
// it) opens nothing, and the edge learns it is not the pinned sandbox.
func TestPinnedHostKey(t *testing.T) {
	ca, _, err := sshca.Generate()
	if err != nil {
		t.Fatal(err)
	}
	_, mine, _ := sshca.GenerateKey()
	_, other, _ := sshca.GenerateKey()
	app, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := app.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, "app")
			c.Close()
		}
	})
	t.Cleanup(func() { app.Close(); wg.Wait() })
	port := app.Addr().(*net.TCPAddr).Port

	d := &podtcp.Dialer{CA: ca, KeyID: "test-edge"}
	pinned := string(ssh.MarshalAuthorizedKey(mine.PublicKey()))
	for _, tc := range []struct {
		name    string
		hostKey ssh.Signer
		wantErr error
	}{
		{"pinned sandbox", mine, nil},
		{"another sandbox", other, podtcp.ErrHostKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := serve(t, podtcp.Keys{HostKey: tc.hostKey, UserCAs: []ssh.PublicKey{ca.PublicKey()}, Principal: "sandbox"})
			c, err := d.Dial(t.Context(), podssh.Target{SandboxID: "sbx-a", ForwardAddr: addr, User: "sandbox", HostKey: pinned}, port)
			if tc.wantErr != nil {
				if c != nil {
					c.Close()
				}
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("dial: %v; want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if b, err := io.ReadAll(c); err != nil || string(b) != "app" {
				t.Errorf("through the forwarder: got %q, %v; want %q", b, err, "app")
			}
		})
	}
}
