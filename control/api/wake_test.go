package api_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/testkit/waitfor"
)

// suspend suspends id through the lifecycle and waits for suspended.
func (e *env) suspend(t *testing.T, id string) {
	t.Helper()
	if err := e.svc.Life.Suspend(context.Background(), id, "test"); err != nil {
		t.Fatal(err)
	}
	var state store.State
	if !waitfor.Try(t, 20*time.Second, func() bool {
		sb, err := e.svc.Store.Sandbox(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		state = sb.State
		return state == store.StateSuspended
	}) {
		t.Fatalf("sandbox %s is %s, want suspended", id, state)
	}
}

// TestExecWakesSuspended: GET shows suspended_at and usage splits compute
// from storage; 100 concurrent exec calls on a suspended sandbox are all
// answered after exactly one restore, and the workspace is intact.
func TestExecWakesSuspended(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, backend, false)
			id := e.createReady(t)
			if code, _, b := e.do("dev", "PUT", "/api/v1/sandboxes/"+id+"/files/note.txt", strings.NewReader("still here")); code != 201 {
				t.Fatalf("put file: %d %s", code, b)
			}
			e.suspend(t, id)

			type view struct {
				Status      string     `json:"status"`
				SuspendedAt *time.Time `json:"suspended_at"`
				DeadlineAt  time.Time  `json:"deadline_at"`
			}
			get := func() view {
				_, _, b := e.do("dev", "GET", "/api/v1/sandboxes/"+id, nil)
				var v view
				_ = json.Unmarshal(b, &v)
				return v
			}
			before := get()
			if before.Status != "suspended" || before.SuspendedAt == nil {
				t.Fatalf("GET suspended sandbox: %+v", before)
			}
			time.Sleep(1100 * time.Millisecond) // a measurable storage interval
			// The deadline clock is paused: the deadline shown moves with time.
			if moved := get().DeadlineAt.Sub(before.DeadlineAt); moved < time.Second {
				t.Fatalf("deadline moved %v in 1.1s suspended, want about 1.1s", moved)
			}
			_, _, b := e.do("dev", "GET", "/api/v1/usage", nil)
			var usage struct {
				Compute float64 `json:"compute_seconds"`
				Storage float64 `json:"storage_seconds"`
			}
			_ = json.Unmarshal(b, &usage)
			if usage.Compute <= 0 || usage.Storage < 1 {
				t.Fatalf("usage %s: want compute and storage seconds apart, storage >= 1", b)
			}

			var wg sync.WaitGroup
			type answer struct {
				code int
				body string
			}
			answers := make(chan answer, 100)
			for range 100 {
				wg.Go(func() {
					code, _, b := e.do("dev", "POST", "/api/v1/sandboxes/"+id+"/exec", strings.NewReader(`{"command":"cat note.txt"}`))
					answers <- answer{code, string(b)}
				})
			}
			wg.Wait()
			close(answers)
			for a := range answers {
				if a.code != 200 || !strings.Contains(a.body, `"stdout":"still here"`) {
					t.Fatalf("exec on suspended sandbox: %d %s", a.code, a.body)
				}
			}
			events, err := e.svc.Store.Events(context.Background(), id, 0)
			if err != nil {
				t.Fatal(err)
			}
			restores := 0
			for _, ev := range events {
				if ev.Type == "state" && ev.State == store.StateReady && ev.Actor == "restorer" {
					restores++
				}
			}
			if restores != 1 {
				t.Fatalf("100 exec calls caused %d restores, want 1", restores)
			}
		})
	}
}

// setSandbox changes sandbox id's row as change says, behind the
// lifecycle's back (a state it would reach only through a provider).
func (e *env) setSandbox(t *testing.T, id string, change func(*store.Sandbox)) {
	t.Helper()
	ctx := t.Context()
	err := e.svc.Store.InTx(ctx, func(tx store.Tx) error {
		cur, err := tx.SandboxForUpdate(ctx, id)
		if err != nil {
			return err
		}
		change(&cur)
		return tx.UpdateSandbox(ctx, cur)
	})
	if err != nil {
		t.Fatalf("update sandbox %s: %v", id, err)
	}
}

// TestWakeTimeoutIs503: a call held past the wake limit gets 503 with
// Retry-After. Here the waker's inline restore fails (the snapshot is
// corrupt) and the job queue that would retry it is off, so the sandbox
// stays restoring.
func TestWakeTimeoutIs503(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	e := newEnv(t, "sqlite", true, func(c *control.Config) {
		c.WakeTimeout = 300 * time.Millisecond
		c.DataDir = dataDir
	})
	sb := e.createDev()
	e.setSandbox(t, sb.ID, func(cur *store.Sandbox) {
		now := time.Now().UTC()
		cur.State, cur.SuspendedAt = store.StateSuspended, &now
	})
	sbDir := filepath.Join(dataDir, "sandboxes", sb.ID)
	if err := os.MkdirAll(sbDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sbDir, "snapshot.tar.gz"), []byte("not a gzip stream"), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	code, hdr, b := e.do("dev", "GET", "/api/v1/sandboxes/"+sb.ID+"/files/x", nil)
	if code != 503 || hdr.Get("Retry-After") == "" || !strings.Contains(string(b), "sandbox_waking") {
		t.Fatalf("got %d Retry-After=%q %s, want 503 sandbox_waking with Retry-After", code, hdr.Get("Retry-After"), b)
	}
	if held := time.Since(start); held < 300*time.Millisecond {
		t.Fatalf("answered after %v, want held for the 300ms wake limit", held)
	}
}

// TestWakeTimeoutWhileSuspending: a call held past the wake limit while
// the sandbox is still being suspended (here nothing carries the
// suspension on: the job queue is off) is told so, not that it is waking.
func TestWakeTimeoutWhileSuspending(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", true, func(c *control.Config) { c.WakeTimeout = 300 * time.Millisecond })
	sb := e.createDev()
	e.setSandbox(t, sb.ID, func(cur *store.Sandbox) { cur.State = store.StateSuspending })
	code, hdr, b := e.do("dev", "GET", "/api/v1/sandboxes/"+sb.ID+"/files/x", nil)
	if code != 503 || hdr.Get("Retry-After") == "" || !strings.Contains(string(b), "sandbox_waking") {
		t.Fatalf("got %d Retry-After=%q %s, want 503 sandbox_waking with Retry-After", code, hdr.Get("Retry-After"), b)
	}
	if !strings.Contains(string(b), "still being suspended") || strings.Contains(string(b), "waking from suspension") {
		t.Errorf("got %s, want a detail saying the sandbox is still being suspended", b)
	}
}
