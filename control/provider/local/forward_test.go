package local_test

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/sbxedge/sbx/auth/sshca"
	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/provider/local"
	"github.com/sbxedge/sbx/internal/podssh"
	"github.com/sbxedge/sbx/internal/podtcp"
	"github.com/sbxedge/sbx/internal/podtcp/podtcptest"
)

// TestForwarder: each sandbox's forwarder carries the edge's
// connections to its ports, for the CA's certificates of the sandbox's
// user only; it lives as long as the server, and its address survives a
// suspend and a restarted provider, like the server's.
func TestForwarder(t *testing.T) {
	perMode(t, time.Minute, func(t *testing.T, ctx context.Context, mode string) {
		const id = "sbx-fwd"
		f, l, _, ep := provisioned(ctx, t, mode, id)
		if ep.ForwardAddr == "" || ep.ForwardAddr == ep.Addr {
			t.Fatalf("ForwardAddr = %q beside Addr %q, want a port of its own", ep.ForwardAddr, ep.Addr)
		}
		app := podtcptest.EchoApp(t)
		d := &podtcp.Dialer{CA: f.ca, KeyID: "edge-test"}
		tg := f.target(id, ep)

		c, err := d.Dial(ctx, tg, app)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := podtcptest.Echo(c, "hello through the forwarder"); err != nil {
			t.Fatal(err)
		}

		probe, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := probe.Addr().(*net.TCPAddr).Port
		probe.Close()
		if _, err := d.Dial(ctx, tg, closed); !errors.Is(err, podtcp.ErrRefused) {
			t.Errorf("Dial to a port nothing listens on = %v, want ErrRefused", err)
		}
		other, _, err := sshca.Generate()
		if err != nil {
			t.Fatal(err)
		}
		stranger := tg
		stranger.User = "someone-else"
		for name, tc := range map[string]struct {
			d  *podtcp.Dialer
			tg podssh.Target
		}{
			"another CA":        {&podtcp.Dialer{CA: other}, tg},
			"another principal": {d, stranger},
		} {
			if c, err := tc.d.Dial(ctx, tc.tg, app); err == nil {
				c.Close()
				t.Errorf("%s: Dial succeeded, want a refusal", name)
			}
		}

		// Suspend ends the forwarder and the connections it carried.
		if err := l.Suspend(ctx, id); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("open connection after Suspend: read %d, %v; want it closed", n, err)
		}
		if c, err := d.Dial(ctx, tg, app); err == nil {
			c.Close()
			t.Fatal("Dial after Suspend succeeded")
		}

		ep2, err := l.Restore(ctx, f.spec(id))
		if err != nil {
			t.Fatal(err)
		}
		if ep2.ForwardAddr != ep.ForwardAddr {
			t.Errorf("ForwardAddr after Restore = %s, want the same %s", ep2.ForwardAddr, ep.ForwardAddr)
		}
		c2, err := d.Dial(ctx, f.target(id, ep2), app)
		if err != nil {
			t.Fatalf("Dial after Restore: %v", err)
		}
		if err := podtcptest.Echo(c2, "again"); err != nil {
			t.Fatal(err)
		}
		c2.Close()

		// A provider started over the same DataDir serves the same
		// address; one whose port was taken meanwhile serves another,
		// as the server's does.
		for _, taken := range []bool{false, true} {
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			want := ep.ForwardAddr
			if taken {
				hold, err := net.Listen("tcp", ep.ForwardAddr)
				if err != nil {
					t.Fatalf("hold the forwarder's port: %v", err)
				}
				defer hold.Close()
				want = ""
			}
			if l, err = local.New(local.Config{DataDir: f.dataDir, Mode: mode}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			if err := l.Start(ctx); err != nil {
				t.Fatal(err)
			}
			inst := assertPhase(t, l, id, provider.PhaseRunning)
			if got := inst.Endpoint.ForwardAddr; (want != "" && got != want) || (want == "" && (got == "" || got == ep.ForwardAddr)) {
				t.Fatalf("taken=%v: ForwardAddr after restart = %q, want %q (empty: another)", taken, got, want)
			}
			c3, err := d.Dial(ctx, f.target(id, inst.Endpoint), app)
			if err != nil {
				t.Fatalf("taken=%v: Dial after restart: %v", taken, err)
			}
			if err := podtcptest.Echo(c3, "port "+strconv.FormatBool(taken)); err != nil {
				t.Fatal(err)
			}
			c3.Close()
		}
	})
}
