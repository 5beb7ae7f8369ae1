package local_test

import (
	"context"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/provider/local"
	"github.com/sbxedge/sbx/internal/podssh"
)

// TestSpecEnv: the spec's Env reaches every session, in either server
// mode, and a provision with another Env (a new gateway address) is
// what the restarted server uses.
func TestSpecEnv(t *testing.T) {
	for _, mode := range []string{local.ModeEmbedded, local.ModeSSHD} {
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			f := newFixture(t)
			l, err := local.New(local.Config{DataDir: f.dataDir, Mode: mode, SSHDSetEnv: []string{"SHLVL=1"}})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { l.Close() }()
			pool := podssh.NewPool(f.ca, nil)
			defer pool.Close()
			spec := f.spec("sbx-penv")
			spec.Env = []string{"HTTP_PROXY=http://sbx-penv:sbx_px_one@127.0.0.1:3128", "NO_PROXY=localhost,127.0.0.1",
				`GREETING=say "hi" \ it's é #1 $HOME`}
			ep, err := l.Provision(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			res, err := pool.Exec(ctx, f.target("sbx-penv", ep), podssh.ExecRequest{Command: "echo $HTTP_PROXY $NO_PROXY"})
			if want := "http://sbx-penv:sbx_px_one@127.0.0.1:3128 localhost,127.0.0.1\n"; err != nil || string(res.Stdout) != want {
				t.Fatalf("session env: %q %q %v; want %q", res.Stdout, res.Stderr, err, want)
			}
			// Spaces, quotes, a backslash, '#', '$' and UTF-8 arrive as sent.
			res, err = pool.Exec(ctx, f.target("sbx-penv", ep), podssh.ExecRequest{Command: `printf '%s\n' "$GREETING"`})
			if want := "say \"hi\" \\ it's é #1 $HOME\n"; err != nil || string(res.Stdout) != want {
				t.Fatalf("printable env value: %q %q %v; want %q", res.Stdout, res.Stderr, err, want)
			}
			pool.Forget("sbx-penv")
			if err := l.Suspend(ctx, "sbx-penv"); err != nil {
				t.Fatal(err)
			}
			spec.Env = []string{"HTTP_PROXY=http://sbx-penv:sbx_px_two@127.0.0.1:3129"}
			if ep, err = l.Restore(ctx, spec); err != nil {
				t.Fatal(err)
			}
			res, err = pool.Exec(ctx, f.target("sbx-penv", ep), podssh.ExecRequest{Command: "echo $HTTP_PROXY ${NO_PROXY:-unset}"})
			if want := "http://sbx-penv:sbx_px_two@127.0.0.1:3129 unset\n"; err != nil || string(res.Stdout) != want {
				t.Fatalf("after restore: %q %q %v; want %q", res.Stdout, res.Stderr, err, want)
			}
			pool.Forget("sbx-penv")
			bad := f.spec("sbx-penv-bad")
			bad.Env = []string{"BAD=two\nlines"}
			if _, err := l.Provision(ctx, bad); err == nil {
				t.Error("an Env value with a newline was accepted")
			}
			if err := l.Destroy(ctx, "sbx-penv"); err != nil {
				t.Fatal(err)
			}
		})
	}
}
