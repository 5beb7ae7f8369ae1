package local_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/provider/local"
	"github.com/sbxedge/sbx/internal/initproto"
	"github.com/sbxedge/sbx/internal/podssh"
	"github.com/sbxedge/sbx/internal/sandboxinit/inittest"
)

// servicesProvider is a local provider in mode for the services tests,
// with an SSH pool to reach the sandboxes' inits; both close with t.
func servicesProvider(t *testing.T, f *fixture, mode string) (*local.Local, *podssh.Pool) {
	t.Helper()
	cfg := local.Config{DataDir: f.dataDir, Mode: mode}
	if mode == local.ModeSSHD {
		cfg.InitPath = inittest.Build(t)
		// Each init call is an sshd session run through the login
		// shell; with SHLVL set, bash skips the machine user's
		// ~/.bashrc (pyenv here: seconds per call under load).
		cfg.SSHDSetEnv = []string{"SHLVL=1"}
	}
	l, err := local.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	pool := podssh.NewPool(f.ca, nil)
	t.Cleanup(func() { pool.Close() })
	return l, pool
}

// TestServices runs one services scenario against both server modes: a
// local sandbox's init answers over its SSH connection (the embedded
// server's subsystem, or sshd's running "sbx-init ctl"); a service with a
// port is running once the port answers; a crashing one is restarted
// with a growing backoff and its exit code reported; logs are read and
// followed; a suspend ends the services and after the restore the same
// declarations run again, their logs showing both runs.
func TestServices(t *testing.T) {
	perMode(t, 2*time.Minute, func(t *testing.T, ctx context.Context, mode string) {
		f := newFixture(t)
		l, pool := servicesProvider(t, f, mode)
		const id = "sbx-svc"
		ep, err := l.Provision(ctx, f.spec(id))
		if err != nil {
			t.Fatal(err)
		}
		ic := initClient(ctx, t, pool, f.target(id, ep))

		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		port := freeTCPPort(t)
		pidFile := filepath.Join(t.TempDir(), "web.pid")
		home := filepath.Join(f.dataDir, "sandboxes", id, "home")
		svcs := []initproto.Service{
			// This test binary as a server holding the port (see daemon).
			{Name: "web", Command: self, Args: []string{"daemon"}, Port: port, Env: map[string]string{
				"SBX_TEST_DAEMON_LISTEN": fmt.Sprintf("127.0.0.1:%d", port), "SBX_TEST_DAEMON_PIDFILE": pidFile,
			}},
			// The file is renamed into place: each restart rewrites it,
			// and a read between the shell's truncate and its write saw
			// it empty (make race, shuffled).
			{Name: "crash", Command: `pwd > where.tmp && mv where.tmp where.txt; echo "home=$HOME"; exit 7`},
		}
		if _, err := ic.Sync(ctx, svcs); err != nil {
			t.Fatal(err)
		}
		web := waitStatus(ctx, t, ic, "web", "running", func(s initproto.Status) bool { return s.State == initproto.StateRunning })
		if web.Starts != 1 || web.Port != port {
			t.Errorf("web = %+v, want one start on port %d", web, port)
		}
		if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second); err != nil {
			t.Errorf("web's port: %v, want it to answer", err)
		} else {
			c.Close()
		}
		crash := waitStatus(ctx, t, ic, "crash", "restarted twice with exit code 7", func(s initproto.Status) bool {
			return s.Starts >= 3 && s.ExitCode != nil && *s.ExitCode == 7
		})
		if crash.State == initproto.StateExited {
			t.Errorf("crash = %+v, want it still supervised", crash)
		}
		res, err := pool.Exec(ctx, f.target(id, ep), podssh.ExecRequest{Command: "cat where.txt"})
		if err != nil || string(res.Stdout) != ep.Workspace+"\n" {
			t.Errorf("service cwd: %q %v, want the workspace %s", res.Stdout, err, ep.Workspace)
		}

		lines, err := ic.Logs(ctx, "crash", 100)
		if err != nil {
			t.Fatal(err)
		}
		var starts []time.Time
		var sawHome, sawExit bool
		for _, ln := range lines {
			switch {
			case strings.HasPrefix(ln.Text, "sbx-init: starting crash"):
				starts = append(starts, ln.At)
			case ln.Text == "home="+home:
				sawHome = true
			case strings.Contains(ln.Text, "crash exited with code 7; restarting in"):
				sawExit = true
			}
		}
		if !sawHome || !sawExit || len(starts) < 3 {
			t.Fatalf("crash's logs lack its HOME, its exit or three starts:\n%s", texts(lines))
		}
		// Backoff: 500 ms, then doubled (sandboxinit's defaults); a
		// little slack for the clock readings.
		if g1, g2 := starts[1].Sub(starts[0]), starts[2].Sub(starts[1]); g1 < 450*time.Millisecond || g2 < 950*time.Millisecond {
			t.Errorf("gaps between starts %v then %v, want at least 500ms then 1s", g1, g2)
		}
		if _, err := ic.Logs(ctx, "nope", 10); !errors.Is(err, initproto.ErrUnknownService) {
			t.Errorf("logs of an unknown service: %v, want ErrUnknownService", err)
		}
		// A followed log streams new lines (the next restart's) and
		// ends when its caller stops.
		fctx, stop := context.WithCancel(ctx)
		var followed []string
		accepted := false
		err = ic.Follow(fctx, "crash", 1, func() error { accepted = true; return nil }, func(ln initproto.Line) error {
			if !accepted {
				t.Errorf("line %q before the follow was accepted", ln.Text)
			}
			if followed = append(followed, ln.Text); len(followed) >= 3 {
				stop()
			}
			return nil
		})
		stop()
		if err != nil || len(followed) < 3 {
			t.Errorf("follow: %q, %v; want the tail and new lines", followed, err)
		}

		webPID := readPID(t, pidFile)
		pool.Forget(id)
		if err := l.Suspend(ctx, id); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(webPID, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("web (pid %d) after suspend: kill 0 = %v, want it gone", webPID, err)
		}
		ep, err = l.Restore(ctx, f.spec(id))
		if err != nil {
			t.Fatal(err)
		}
		ic = initClient(ctx, t, pool, f.target(id, ep))
		if st, err := ic.List(ctx); err != nil || len(st) != 0 {
			t.Fatalf("after restore: %+v, %v; want a fresh init with no services", st, err)
		}
		// Control pushes the declared set again once restored.
		if _, err := ic.Sync(ctx, svcs[:1]); err != nil {
			t.Fatal(err)
		}
		waitStatus(ctx, t, ic, "web", "running after the restore", func(s initproto.Status) bool {
			return s.State == initproto.StateRunning && s.Starts == 1
		})
		lines, err = ic.Logs(ctx, "web", 100)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(texts(lines), "sbx-init: starting web"); n != 2 {
			t.Errorf("web's logs show %d starts across the restore, want 2:\n%s", n, texts(lines))
		}
	})
}

func initClient(ctx context.Context, t *testing.T, pool *podssh.Pool, target podssh.Target) initproto.Client {
	t.Helper()
	c, err := pool.Client(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	return initproto.Client{SSH: c}
}

func waitStatus(ctx context.Context, t *testing.T, ic initproto.Client, name, what string, cond func(initproto.Status) bool) initproto.Status {
	t.Helper()
	var last initproto.Status
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		st, err := ic.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range st {
			if s.Name == name {
				if last = s; cond(s) {
					return s
				}
			}
		}
	}
	t.Fatalf("service %s never %s; last %+v", name, what, last)
	return last
}

func texts(lines []initproto.Line) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l.Text + "\n")
	}
	return b.String()
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(string(b))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}
