package main

import (
	"context"
	"io/fs"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/testkit/tcpproxy"
	"github.com/sbxedge/sbx/internal/testkit/testdb"
)

// checkLedgers fails t unless every sandbox in st keeps the billing rule
// (lifecycle.CheckLedger): one open compute line while ready, one open
// storage line while offloaded, none otherwise, none for a sandbox never
// ready. when names the moment for the failure message.
func checkLedgers(t *testing.T, st store.Store, when string) {
	t.Helper()
	ctx := context.Background()
	sbs, err := st.SandboxesInStates(ctx, store.States...)
	if err != nil {
		t.Fatalf("%s: list sandboxes: %v", when, err)
	}
	for _, sb := range sbs {
		sb, ss := sandboxAndSessions(t, st, sb, when)
		if err := lifecycle.CheckLedger(sb, ss); err != nil {
			t.Errorf("%s: %v", when, err)
		}
	}
}

// sandboxAndSessions reads sb's sessions and re-reads sb, until its state
// is the same before and after: the two reads are not one snapshot, and a
// transition (which changes the state and the sessions in one
// transaction) may commit between them, as one already sent does when
// Postgres is cut off.
func sandboxAndSessions(t *testing.T, st store.Store, sb store.Sandbox, when string) (store.Sandbox, []store.Session) {
	t.Helper()
	ctx := context.Background()
	for range 5 {
		ss, err := st.Sessions(ctx, sb.ID)
		if err != nil {
			t.Fatalf("%s: sessions of %s: %v", when, sb.ID, err)
		}
		after, err := st.Sandbox(ctx, sb.ID)
		if err != nil {
			t.Fatalf("%s: re-read %s: %v", when, sb.ID, err)
		}
		if after.State == sb.State {
			return after, ss
		}
		sb = after
	}
	t.Fatalf("%s: %s kept changing state while its ledger was read", when, sb.ID)
	return sb, nil
}

// TestCrashKeepsLedgerExact kills `sbx dev` with SIGKILL at each point of
// the lifecycle where a state change has committed and the work it implies
// has not run (mid-create, mid-delete, mid-suspend), restarts it on the
// same database, and checks the billing rule on every sandbox before the
// crash and after the restart, and that the work finishes. Suspends start
// in another control (this test process, on the same database), as the
// idle detector of another replica would.
func TestCrashKeepsLedgerExact(t *testing.T) {
	forEachBackend(t, func(t *testing.T, dbURL string) {
		ctx := context.Background()
		dataDir := t.TempDir()
		st := openStore(t, dataDir, dbURL)
		other := lifecycle.New(lifecycle.Config{}, lifecycle.Deps{Store: st})
		crashAt := func(p *devProc, when string) {
			t.Helper()
			checkLedgers(t, st, "before the crash "+when)
			p.crash()
		}

		// 1. Mid-create: the sandbox row and its provisioning job are
		// committed, nothing runs (job queue off). Crash; the restart
		// provisions it.
		p := startDev(t, dataDir, dbURL, "--run-jobs=false")
		var sb sbView
		if code := p.call("POST", "/api/v1/sandboxes", map[string]any{"profile": "tuist-linux-small"}, &sb); code != 201 {
			t.Fatalf("create: %d", code)
		}
		crashAt(p, "mid-create")
		p = startDev(t, dataDir, dbURL)
		p.waitStatus(sb.ID, "ready", 30*time.Second)
		checkLedgers(t, st, "after the restart mid-create")

		// 2. While ready: the open interval survives as is.
		crashAt(p, "while ready")
		p = startDev(t, dataDir, dbURL, "--run-jobs=false")
		p.waitStatus(sb.ID, "ready", 5*time.Second)
		checkLedgers(t, st, "after the restart while ready")

		// 3. Mid-suspend: ready -> suspending committed (compute line
		// closed, storage line open, snapshot job queued), not worked.
		if err := other.Suspend(ctx, sb.ID, "test"); err != nil {
			t.Fatal(err)
		}
		p.waitStatus(sb.ID, "suspending", 5*time.Second)
		crashAt(p, "mid-suspend")
		p = startDev(t, dataDir, dbURL)
		p.waitStatus(sb.ID, "suspended", 30*time.Second)
		checkLedgers(t, st, "after the restart mid-suspend")
		if got := ledger(t, st, sb.ID); got != "compute:idle_offload storage:open" {
			t.Fatalf("ledger after the suspend finished: %q", got)
		}

		// 4. Woken (exec), then mid-delete: terminating committed with its
		// lines closed, teardown job queued, not worked.
		if code := p.call("POST", "/api/v1/sandboxes/"+sb.ID+"/exec", map[string]any{"command": "true"}, nil); code != 200 {
			t.Fatalf("exec waking the sandbox: %d", code)
		}
		p.crash() // while ready again; no check needed beyond the next one
		p = startDev(t, dataDir, dbURL, "--run-jobs=false")
		p.waitStatus(sb.ID, "ready", 5*time.Second)
		if code := p.call("DELETE", "/api/v1/sandboxes/"+sb.ID, nil, nil); code != 200 {
			t.Fatalf("delete: %d", code)
		}
		crashAt(p, "mid-delete")

		// 5. The restart finishes the sandbox.
		p = startDev(t, dataDir, dbURL)
		p.waitStatus(sb.ID, "terminated", 30*time.Second)
		p.stop()
		checkLedgers(t, st, "after the restart mid-delete")
		if got := ledger(t, st, sb.ID); got != "compute:idle_offload storage:restored compute:explicit_delete" {
			t.Fatalf("ledger after crashes = %q, want one closed line per interval", got)
		}
	})
}

// TestPostgresRestartMidCreate cuts control off from Postgres (a TCP proxy
// between them closes every connection and refuses new ones, as a restart
// of the server does) right after a create is accepted, while its
// provisioning runs, and restores it seconds later. The sandbox still
// becomes ready, and the ledger holds exactly one open line for it. The
// shared Postgres is never restarted: the proxy is this test's own.
func TestPostgresRestartMidCreate(t *testing.T) {
	t.Parallel()
	dbURL := testdb.Postgres(t)
	px := tcpproxy.New(t, "127.0.0.1:5432")
	viaProxy := replaceHost(t, dbURL, px.Addr)
	dataDir := t.TempDir()
	p := startDev(t, dataDir, viaProxy)
	st := openStore(t, dataDir, dbURL) // direct, so the check sees through the outage

	var sbs []sbView
	for range 3 {
		var sb sbView
		if code := p.call("POST", "/api/v1/sandboxes", map[string]any{"profile": "tuist-linux-small"}, &sb); code != 201 {
			t.Fatalf("create: %d", code)
		}
		sbs = append(sbs, sb)
	}
	// Cut once River has taken every provision job. A cut while the fetch
	// that marks jobs running is in flight leaves them running with no
	// worker, and only River's stuck-job rescue (JobTimeout + 1 min)
	// recovers them; that window is a known limit, not what this test
	// measures (see the issue 11 note).
	waitProvisionsTaken(t, dbURL)
	// A job marked running is not yet a job River's worker has: the fetch
	// commits before its answer crosses the proxy. Cutting in between is
	// that same window (CI's loaded run hit it); a sandbox's folder shows
	// its worker has begun.
	var ids []string
	for _, sb := range sbs {
		ids = append(ids, sb.ID)
	}
	waitProvisionsBegun(t, dataDir, ids)
	px.Stop() // Postgres "restarts"
	for _, sb := range sbs {
		cur, err := st.Sandbox(context.Background(), sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s was %s when Postgres went away", sb.ID, cur.State)
	}
	checkLedgers(t, st, "during the outage")
	time.Sleep(3 * time.Second)
	px.Start(t)
	back := time.Now()
	for _, sb := range sbs {
		p.waitStatus(sb.ID, "ready", 2*time.Minute)
	}
	t.Logf("all ready %v after Postgres came back", time.Since(back).Round(time.Millisecond))
	checkLedgers(t, st, "after the outage")
	for _, sb := range sbs {
		if got := ledger(t, st, sb.ID); got != "compute:open" {
			t.Fatalf("ledger of %s after the outage: %q, want one open compute line", sb.ID, got)
		}
	}
	p.stop()
}

// replaceHost points a database URL at another host:port.
func replaceHost(t *testing.T, rawURL, hostPort string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = hostPort
	return u.String()
}

// TestCrashMidRestore kills `sbx dev` with SIGKILL while an exec is
// restoring a suspended sandbox (its restore in flight, state restoring),
// and restarts it on the same database: the restore is taken over, the
// sandbox becomes ready with its workspace, and the billing rule holds
// before the crash and after. The workspace holds 64 MB so that the
// restore lasts long enough to be caught in flight.
func TestCrashMidRestore(t *testing.T) {
	forEachBackend(t, func(t *testing.T, dbURL string) {
		ctx := context.Background()
		dataDir := t.TempDir()
		st := openStore(t, dataDir, dbURL)
		other := lifecycle.New(lifecycle.Config{}, lifecycle.Deps{Store: st})
		p := startDev(t, dataDir, dbURL)
		id := createReady(t, p)
		if code := p.call("POST", "/api/v1/sandboxes/"+id+"/exec",
			map[string]any{"command": "head -c 67108864 /dev/urandom > big && sha256sum big > big.sum"}, nil); code != 200 {
			t.Fatalf("exec writing the workspace: %d", code)
		}
		if err := other.Suspend(ctx, id, "test"); err != nil {
			t.Fatal(err)
		}
		p.waitStatus(id, "suspended", 2*time.Minute)

		woke := make(chan struct{})
		go func() { // the waker; its exec dies with the process
			defer close(woke)
			c := &http.Client{Timeout: 2 * time.Minute}
			req, _ := http.NewRequest("POST", p.API+"/api/v1/sandboxes/"+id+"/exec", strings.NewReader(`{"command":"true"}`))
			req.Header.Set("Authorization", "Bearer "+p.Token)
			if resp, err := c.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
			sb, err := st.Sandbox(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if sb.State == store.StateRestoring {
				break
			}
			if sb.State != store.StateSuspended || time.Now().After(deadline) {
				t.Fatalf("sandbox is %s, want to catch it restoring", sb.State)
			}
		}
		p.crash()
		<-woke
		checkLedgers(t, st, "after the crash mid-restore")
		if sb, _ := st.Sandbox(ctx, id); sb.State != store.StateRestoring {
			t.Fatalf("the crash left the sandbox %s, want restoring (the restore finished before the kill)", sb.State)
		}

		p = startDev(t, dataDir, dbURL)
		p.waitStatus(id, "ready", time.Minute)
		checkLedgers(t, st, "after the restart mid-restore")
		var res struct {
			ExitCode int `json:"exit_code"`
		}
		if code := p.call("POST", "/api/v1/sandboxes/"+id+"/exec", map[string]any{"command": "sha256sum -c big.sum"}, &res); code != 200 || res.ExitCode != 0 {
			t.Fatalf("workspace after the restored restore: exec %d, exit %d", code, res.ExitCode)
		}
		p.stop()
	})
}

// waitProvisionsTaken waits until no provision job waits in River's
// queue: each has been fetched by a worker (or already finished).
// waitProvisionsBegun waits until the local provider has made a folder
// for each sandbox under dataDir, which its Provision does first.
func waitProvisionsBegun(t *testing.T, dataDir string, ids []string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		seen := map[string]bool{}
		_ = filepath.WalkDir(dataDir, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() && slices.Contains(ids, d.Name()) {
				seen[d.Name()] = true
				return filepath.SkipDir
			}
			return nil
		})
		if len(seen) == len(ids) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("provisions begun for %v of %v after a minute", seen, ids)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitProvisionsTaken(t *testing.T, dbURL string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for {
		var waiting int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = $1 AND state IN ('available', 'scheduled', 'pending')`,
			lifecycle.ProvisionArgs{}.Kind()).Scan(&waiting)
		if err != nil {
			t.Fatalf("count waiting provision jobs: %v", err)
		}
		if waiting == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d provision jobs still waiting after a minute", waiting)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
