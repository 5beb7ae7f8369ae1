package podtcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// burst dials n connections to port through d at once, sends each a
// line and checks its answer; it returns the first failure.
func burst(t *testing.T, d *Dialer, tg Target, port, n int) error {
	t.Helper()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			err := func() error {
				c, err := d.Dial(t.Context(), tg, port)
				if err != nil {
					return err
				}
				defer c.Close()
				msg := fmt.Sprintf("conn %d", i)
				if _, err := c.Write([]byte(msg)); err != nil {
					return err
				}
				if err := c.(*net.TCPConn).CloseWrite(); err != nil {
					return err
				}
				_ = c.SetReadDeadline(time.Now().Add(time.Minute))
				b, err := io.ReadAll(c)
				if want := fmt.Sprintf("CONN %dbye", i); err != nil || string(b) != want {
					return fmt.Errorf("conn %d: got %q, %v; want %q", i, b, err, want)
				}
				return nil
			}()
			if err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	return first
}

// TestDialerBurstPastForwarderLimit: a burst of many more new
// connections than the forwarder's MaxHandshakes, all at once, all get
// through, because the edge's dialer holds its own handshakes to one
// forwarder below the forwarder's bound and queues the rest. The
// forwarder here closes at once what is past its bound (no queue of its
// own), so the dialer's bound is what is tested.
func TestDialerBurstPastForwarderLimit(t *testing.T) {
	ca, host := newCA(t), newKey(t)
	f := &Forwarder{Keys: fixed(host, ca.PublicKey()), MaxHandshakes: 8, HandshakeQueue: -1}
	addr, _ := serve(t, f)
	port, _ := startApp(t, "tcp", "127.0.0.1:0")
	tg := Target{SandboxID: "sb-burst", ForwardAddr: addr, User: "sbx", HostKey: string(ssh.MarshalAuthorizedKey(host.PublicKey()))}
	d := &Dialer{CA: ca, MaxHandshakes: 8}
	if err := burst(t, d, tg, port, 200); err != nil {
		t.Fatal(err)
	}
	d.slotsMu.Lock()
	defer d.slotsMu.Unlock()
	if len(d.slots) != 0 {
		t.Errorf("%d forwarders' handshake slots kept after every dial ended", len(d.slots))
	}
}

// TestForwarderQueuesPastLimit: an edge that does not bound its
// handshakes (or several edges together) past the forwarder's
// MaxHandshakes waits for a slot instead of being closed.
func TestForwarderQueuesPastLimit(t *testing.T) {
	ca, host := newCA(t), newKey(t)
	f := &Forwarder{Keys: fixed(host, ca.PublicKey()), MaxHandshakes: 2, HandshakeQueue: time.Minute}
	addr, _ := serve(t, f)
	port, _ := startApp(t, "tcp", "127.0.0.1:0")
	tg := Target{SandboxID: "sb-burst", ForwardAddr: addr, User: "sbx", HostKey: string(ssh.MarshalAuthorizedKey(host.PublicKey()))}
	d := &Dialer{CA: ca, MaxHandshakes: 1000}
	if err := burst(t, d, tg, port, 100); err != nil {
		t.Fatal(err)
	}
}

// TestDialerSlotWaitEndsWithContext: a dial waiting for a handshake slot
// gives up when its context ends, and leaves no slot behind.
func TestDialerSlotWaitEndsWithContext(t *testing.T) {
	d := &Dialer{MaxHandshakes: 1}
	release, err := d.acquire(t.Context(), "fwd:1")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := d.acquire(ctx, "fwd:1"); !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire past the bound with an ended context: %v", err)
	}
	release()
	if len(d.slots) != 0 {
		t.Errorf("slots kept: %v", d.slots)
	}
}
