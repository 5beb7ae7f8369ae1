package local_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/internal/initproto"
)

// TestServicesStartWithTheSandbox: the spec's Services run once the
// provider has started the sandbox, with no call to its init, and the
// endpoint says so (ServicesStarted, on which control skips its Sync);
// a Provision that finds the sandbox running does not say so; control's
// Sync of the same set afterwards starts nothing again; a restore starts
// them once more, and a declaration changed while suspended restores as
// changed. A service counting its starts in the workspace (which the
// snapshot keeps) sees 1, then one more per restore.
func TestServicesStartWithTheSandbox(t *testing.T) {
	perMode(t, 2*time.Minute, func(t *testing.T, ctx context.Context, mode string) {
		f := newFixture(t)
		l, pool := servicesProvider(t, f, mode)
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		port := freeTCPPort(t)
		web := initproto.Service{
			Name: "web", Command: `echo start >> starts.log && exec "$SELF" daemon`, Port: port,
			Env: map[string]string{
				"SELF": self, "SBX_TEST_DAEMON_LISTEN": fmt.Sprintf("127.0.0.1:%d", port),
				"SBX_TEST_DAEMON_PIDFILE": filepath.Join(t.TempDir(), "web.pid"),
			},
		}
		const id = "sbx-boot-svc"
		spec := func(sv initproto.Service) provider.Spec {
			s := f.spec(id)
			s.Services = []initproto.Service{sv}
			return s
		}
		starts := func(ws string) int {
			t.Helper()
			b, err := os.ReadFile(filepath.Join(ws, "starts.log"))
			if err != nil {
				t.Fatal(err)
			}
			return strings.Count(string(b), "start\n")
		}
		// check waits for web to run as declared, then pushes the same
		// set as control does and wants the count unchanged by it.
		check := func(ep provider.Endpoint, sv initproto.Service, want int, when string) {
			t.Helper()
			ic := initClient(ctx, t, pool, f.target(id, ep))
			running := func(s initproto.Status) bool {
				return s.State == initproto.StateRunning && s.Env["V"] == sv.Env["V"]
			}
			st := waitStatus(ctx, t, ic, "web", "running "+when, running)
			if _, err := ic.Sync(ctx, []initproto.Service{sv}); err != nil {
				t.Fatal(err)
			}
			after := waitStatus(ctx, t, ic, "web", "running after the Sync "+when, running)
			if after.PID != st.PID || after.Starts != 1 {
				t.Errorf("%s: the Sync of the same set restarted web: pid %d → %d, starts %d", when, st.PID, after.PID, after.Starts)
			}
			if n := starts(ep.Workspace); n != want {
				t.Errorf("%s: web started %d times in all, want %d", when, n, want)
			}
		}

		ep, err := l.Provision(ctx, spec(web))
		if err != nil {
			t.Fatal(err)
		}
		if !ep.ServicesStarted {
			t.Error("create: the endpoint does not say the services started")
		}
		check(ep, web, 1, "after create")
		// The server runs: this spec's services were not started by it.
		if again, err := l.Provision(ctx, spec(withEnv(web, "V", "other"))); err != nil {
			t.Fatal(err)
		} else if again.ServicesStarted {
			t.Error("a Provision that found the sandbox running says it started the services")
		}
		for i, sv := range []initproto.Service{web, withEnv(web, "V", "2")} {
			pool.Forget(id)
			if err := l.Suspend(ctx, id); err != nil {
				t.Fatal(err)
			}
			if ep, err = l.Restore(ctx, spec(sv)); err != nil {
				t.Fatal(err)
			}
			if !ep.ServicesStarted {
				t.Errorf("restore %d: the endpoint does not say the services started", i+1)
			}
			check(ep, sv, 2+i, fmt.Sprintf("after restore %d", i+1))
		}
	})
}

func withEnv(sv initproto.Service, k, v string) initproto.Service {
	sv.Env = maps.Clone(sv.Env)
	sv.Env[k] = v
	return sv
}
