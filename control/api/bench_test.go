package api_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/devseed"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/podssh"
)

// createReady creates a sandbox as dev and waits for ready.
func (e *env) createReady(tb testing.TB) string {
	tb.Helper()
	code, _, b := e.do("dev", "POST", "/api/v1/sandboxes", strings.NewReader(`{"profile":"tuist-linux-small"}`))
	if code != 201 {
		tb.Fatalf("create: %d %s", code, b)
	}
	var sb struct{ ID, Status string }
	_ = json.Unmarshal(b, &sb)
	// BenchmarkCreateToReady times this wait, so a benchmark polls
	// finely; a test polls gently, not to take CPU from the provisioning
	// it waits for (a -race run on two shared cores is slow enough).
	poll := 50 * time.Millisecond
	if _, bench := tb.(*testing.B); bench {
		poll = 2 * time.Millisecond
	}
	// A hang detector, not a speed check: provisioning took up to 8 s in
	// a -race run of this package alone at load 30, and more than 30 s in
	// a whole-tree make race.
	for deadline := time.Now().Add(2 * time.Minute); sb.Status != "ready"; {
		if time.Now().After(deadline) {
			_, _, evs := e.do("dev", "GET", "/api/v1/sandboxes/"+sb.ID+"/events", nil)
			tb.Fatalf("sandbox %s still %s after 2 min; its events: %s", sb.ID, sb.Status, evs)
		}
		time.Sleep(poll)
		_, _, b = e.do("dev", "GET", "/api/v1/sandboxes/"+sb.ID, nil)
		_ = json.Unmarshal(b, &sb)
	}
	return sb.ID
}

// newBenchEnv is newEnv with the dev account's limit lifted, so the
// benchmarks measure work rather than refusals.
func newBenchEnv(b *testing.B, backend string) *env {
	b.Helper()
	noJobs := strings.HasSuffix(backend, "-nojobs")
	e := newEnv(b, strings.TrimSuffix(backend, "-nojobs"), noJobs)
	ctx := context.Background()
	err := e.svc.Store.InTx(ctx, func(tx store.Tx) error {
		a, err := tx.Account(ctx, devseed.AccountID)
		if err != nil {
			return err
		}
		a.ConcurrentLimit = 1 << 30
		return tx.UpsertAccount(ctx, a)
	})
	if err != nil {
		b.Fatal(err)
	}
	return e
}

// BenchmarkCreateToReady measures POST /sandboxes until GET says ready,
// in the dev stack (SQLite, local provider, embedded sshd).
func BenchmarkCreateToReady(b *testing.B) {
	e := newBenchEnv(b, "sqlite")
	for b.Loop() {
		id := e.createReady(b)
		b.StopTimer()
		e.do("dev", "DELETE", "/api/v1/sandboxes/"+id, nil)
		b.StartTimer()
	}
}

// BenchmarkExec compares POST /exec of `true` with the same command run
// directly over the pooled SSH connection to the same sandbox, in the same
// run; the ratio is the API's overhead.
func BenchmarkExec(b *testing.B) {
	e := newBenchEnv(b, "sqlite")
	id := e.createReady(b)
	sb, err := e.svc.Store.Sandbox(context.Background(), id)
	if err != nil {
		b.Fatal(err)
	}
	target := podssh.Target{SandboxID: sb.ID, Addr: sb.Endpoint, User: sb.SSHUser, HostKey: sb.HostKey, Workspace: sb.Workspace}
	direct := func() {
		if _, err := e.svc.Pool.Exec(context.Background(), target, podssh.ExecRequest{Command: "true"}); err != nil {
			b.Fatal(err)
		}
	}
	viaAPI := func() {
		if code, _, body := e.do("dev", "POST", "/api/v1/sandboxes/"+id+"/exec", strings.NewReader(`{"command":"true"}`)); code != 200 {
			b.Fatalf("exec: %d %s", code, body)
		}
	}
	direct()
	viaAPI()
	d, a := alternate(b, direct, viaAPI)
	b.ReportMetric(float64(a.Microseconds())/float64(b.N), "api_us/exec")
	b.ReportMetric(float64(d.Microseconds())/float64(b.N), "direct_us/exec")
	b.ReportMetric(float64(a)/float64(d), "api/direct")
}

// BenchmarkCreateThroughput measures admission (auth, limit check under
// the account lock, insert, event, job enqueue in one transaction) on
// Postgres, with parallel clients. Provisioning is off so the figure is
// the control plane's, not the provider's.
func BenchmarkCreateThroughput(b *testing.B) {
	e := newBenchEnv(b, "postgres-nojobs")
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			code, _, body := e.do("dev", "POST", "/api/v1/sandboxes", strings.NewReader(`{"profile":"tuist-linux-small"}`))
			if code != 201 && code != 429 {
				b.Errorf("create: %d %s", code, body)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "creates/s")
}

// alternate runs first and second 50 times each per b.Loop iteration,
// one after the other, and returns the sums over the iterations of each
// one's mean time per call.
func alternate(b *testing.B, first, second func()) (sumFirst, sumSecond time.Duration) {
	const n = 50
	measure := func(f func()) time.Duration {
		start := time.Now()
		for range n {
			f()
		}
		return time.Since(start) / n
	}
	for b.Loop() {
		sumFirst += measure(first)
		sumSecond += measure(second)
	}
	return sumFirst, sumSecond
}
