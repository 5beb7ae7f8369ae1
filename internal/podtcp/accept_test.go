package podtcp_test

import (
	"context"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/auth/sshca"
	"github.com/sbxedge/sbx/internal/podssh"
	"github.com/sbxedge/sbx/internal/podtcp"
)

// emfileListener fails its first accepts as a process out of
// descriptors does.
type emfileListener struct {
	net.Listener
	fails atomic.Int32
}

func (l *emfileListener) Accept() (net.Conn, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// TestServeOutlastsDescriptorShortage: running out of descriptors for a
// moment does not stop the forwarder.
func TestServeOutlastsDescriptorShortage(t *testing.T) {
	defer goleak.VerifyNone(t)
	ca, _, err := sshca.Generate()
	if err != nil {
		t.Fatal(err)
	}
	_, host, err := sshca.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	app, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	appDone := make(chan struct{})
	go func() {
		defer close(appDone)
		c, err := app.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.WriteString(c, "up")
	}()

	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &emfileListener{Listener: inner}
	ln.fails.Store(3)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	fw := &podtcp.Forwarder{Keys: func() (podtcp.Keys, error) {
		return podtcp.Keys{HostKey: host, UserCAs: []ssh.PublicKey{ca.PublicKey()}, Principal: "sbx"}, nil
	}}
	go func() { served <- fw.Serve(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve = %v, want nil once ctx ended", err)
		}
		app.Close()
		<-appDone
	}()

	d := &podtcp.Dialer{CA: ca, Timeout: 10 * time.Second}
	tg := podssh.Target{SandboxID: "sb1", ForwardAddr: inner.Addr().String(), User: "sbx",
		HostKey: string(ssh.MarshalAuthorizedKey(host.PublicKey()))}
	c, err := d.Dial(context.Background(), tg, app.Addr().(*net.TCPAddr).Port)
	if err != nil {
		t.Fatalf("Dial after the accept failures: %v", err)
	}
	defer c.Close()
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "up" {
		t.Fatalf("read %q, %v; want %q", b, err, "up")
	}
}
