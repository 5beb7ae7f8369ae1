package local_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/provider/local"
	"github.com/sbxedge/sbx/internal/podssh"
	"github.com/sbxedge/sbx/internal/sandboxinit"
)

// TestEmbeddedInit: a local sandbox's embedded server offers the init's
// control protocol over SSH; services run in the workspace, and a suspend
// ends them with the sandbox (control starts them again after restore).
func TestEmbeddedInit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := newFixture(t)
	l, err := local.New(local.Config{DataDir: f.dataDir, Mode: local.ModeEmbedded})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	pool := podssh.NewPool(f.ca, nil)
	defer pool.Close()
	const id = "sbx-init"
	ep, err := l.Provision(ctx, f.spec(id))
	if err != nil {
		t.Fatal(err)
	}
	c, err := pool.Client(ctx, f.target(id, ep))
	if err != nil {
		t.Fatal(err)
	}
	ic := sandboxinit.Client{SSH: c}
	if _, err := ic.Sync(ctx, []sandboxinit.Service{{Name: "pwd", Command: "pwd > where.txt; echo \"$HOME\"; sleep 30"}}); err != nil {
		t.Fatal(err)
	}
	var st []sandboxinit.Status
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if st, err = ic.List(ctx); err != nil {
			t.Fatal(err)
		}
		if len(st) == 1 && st[0].State == sandboxinit.StateRunning {
			break
		}
	}
	if len(st) != 1 || st[0].Name != "pwd" || st[0].State != sandboxinit.StateRunning || st[0].Starts != 1 {
		t.Fatalf("List = %+v, want pwd running once", st)
	}
	res, err := pool.Exec(ctx, f.target(id, ep), podssh.ExecRequest{Command: "cat where.txt"})
	if err != nil || string(res.Stdout) != ep.Workspace+"\n" {
		t.Errorf("service cwd: %q %v, want the workspace %s", res.Stdout, err, ep.Workspace)
	}
	if _, err := ic.Logs(ctx, "nope", 10); !errors.Is(err, sandboxinit.ErrUnknownService) {
		t.Errorf("logs of an unknown service: %v, want ErrUnknownService", err)
	}

	pool.Forget(id)
	if err := l.Suspend(ctx, id); err != nil {
		t.Fatal(err)
	}
	ep, err = l.Restore(ctx, f.spec(id))
	if err != nil {
		t.Fatal(err)
	}
	c, err = pool.Client(ctx, f.target(id, ep))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := (sandboxinit.Client{SSH: c}).List(ctx); err != nil || len(st) != 0 {
		t.Errorf("after restore: %+v, %v; want a fresh init with no services", st, err)
	}
}
