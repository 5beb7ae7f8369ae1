package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sbxedge/sbx/activity/redisstore"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/testkit/testdb"
)

const redisAddr = "127.0.0.1:6379"

// redisPrefix returns a key prefix of the test's own and deletes its keys
// when the test ends.
func redisPrefix(t *testing.T) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	p := "sbxtest:" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: redisAddr})
		defer c.Close()
		ctx := context.Background()
		if keys, err := c.Keys(ctx, p+"*").Result(); err == nil && len(keys) > 0 {
			c.Del(ctx, keys...)
		}
	})
	return p
}

// ledger renders a sandbox's billing lines as kind:reason (or kind:open).
func ledger(t *testing.T, st store.Store, id string) string {
	t.Helper()
	ss, err := st.Sessions(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for _, s := range ss {
		r := "open"
		if s.EndedAt != nil {
			r = s.EndReason
		}
		parts = append(parts, string(s.Kind)+":"+r)
	}
	return strings.Join(parts, " ")
}

// holdsStatus fails if the sandbox leaves want within d.
func (p *devProc) holdsStatus(id, want string, d time.Duration) {
	p.t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		var sb sbView
		p.call("GET", "/api/v1/sandboxes/"+id, nil, &sb)
		if sb.Status != want {
			p.t.Fatalf("sandbox %s became %s, want it to stay %s", id, sb.Status, want)
		}
	}
}

// TestIdleOffloadEndToEnd runs `sbx dev --idle-timeout 3s` and drives a
// sandbox through idle suspends and wakes by SSH (real OpenSSH), by a
// preview request (curl through the preview proxy) and by the exec API, on SQLite with in-memory activity (embedded server) and
// on Postgres with Redis (the machine's sshd).
func TestIdleOffloadEndToEnd(t *testing.T) {
	cases := []struct{ name, mode, backend string }{
		{"embedded-sqlite-memory", "embedded", "sqlite"},
		{"sshd-postgres-redis", "sshd", "postgres"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			extra := []string{"--idle-timeout", "3s", "--sandbox-server", c.mode}
			dbURL := ""
			if c.backend == "postgres" {
				dbURL = testdb.Postgres(t)
				extra = append(extra, "--redis-url", "redis://"+redisAddr, "--redis-prefix", redisPrefix(t))
			}
			p := startDev(t, filepath.Join(dir, "data"), dbURL, extra...)
			st := openStore(t, p.DataDir, dbURL)
			id := createReady(t, p)
			target := mint(t, p, id, dir)
			if code := p.putFile(id, "note.txt", "written before the nap\n"); code != 201 {
				t.Fatalf("put file: %d", code)
			}

			// 1. Idle -> suspended; the ledger shows why.
			p.waitStatus(id, "suspended", 30*time.Second)
			if got := ledger(t, st, id); got != "compute:idle_offload storage:open" {
				t.Fatalf("ledger after idle suspend: %q", got)
			}
			var view struct {
				SuspendedAt *time.Time `json:"suspended_at"`
			}
			p.call("GET", "/api/v1/sandboxes/"+id, nil, &view)
			if view.SuspendedAt == nil {
				t.Fatal("GET of a suspended sandbox has no suspended_at")
			}

			// 2. ssh wakes it, says so, and the file is there.
			// Absolute: an sshd-mode login starts in the home folder.
			var sbv sbView
			p.call("GET", "/api/v1/sandboxes/"+id, nil, &sbv)
			note := *sbv.Workspace + "/note.txt"
			out, errOut, code := runTool(t, "", "ssh", append(target.opts("-p"), target.dest(), "cat "+note)...)
			if code != 0 || out != "written before the nap\n" {
				t.Fatalf("ssh cat after suspend: exit %d stdout %q stderr %q", code, out, errOut)
			}
			if !strings.Contains(errOut, "sbx: waking sandbox "+id) {
				t.Fatalf("ssh stderr %q does not say the sandbox is waking", errOut)
			}
			if got := ledger(t, st, id); got != "compute:idle_offload storage:restored compute:open" {
				t.Fatalf("ledger after ssh wake: %q", got)
			}

			// 3. Suspended again; a preview request wakes it (see
			// previewWakes for what a user gets from a dev server that the
			// suspend ended).
			previewWakes(t, p, id, func() string { return ledger(t, st, id) })

			// 4. Suspended again; exec wakes it.
			p.waitStatus(id, "suspended", 30*time.Second)
			var res struct {
				Stdout   string `json:"stdout"`
				ExitCode int    `json:"exit_code"`
			}
			if code := p.call("POST", "/api/v1/sandboxes/"+id+"/exec", map[string]any{"command": "cat note.txt"}, &res); code != 200 || res.Stdout != "written before the nap\n" {
				t.Fatalf("exec after suspend: %d %+v", code, res)
			}

			// 5. A quiet open session (ssh -N) is never suspended; once it
			// closes, the sandbox is.
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			quiet := exec.CommandContext(ctx, "ssh", append(target.opts("-p"), "-N", target.dest())...)
			if err := quiet.Start(); err != nil {
				t.Fatal(err)
			}
			p.holdsStatus(id, "ready", 10*time.Second) // over three idle timeouts
			cancel()
			_ = quiet.Wait()
			p.waitStatus(id, "suspended", 30*time.Second)
			if got := ledger(t, st, id); got != "compute:idle_offload storage:restored compute:idle_offload storage:restored compute:idle_offload storage:restored compute:idle_offload storage:open" {
				t.Fatalf("ledger after four suspends: %q", got)
			}
			var usage struct {
				Compute float64 `json:"compute_seconds"`
				Storage float64 `json:"storage_seconds"`
			}
			p.call("GET", "/api/v1/usage", nil, &usage)
			if usage.Compute <= 0 || usage.Storage <= 0 {
				t.Fatalf("usage %+v: want compute and storage seconds", usage)
			}
		})
	}
}

// putFile uploads a file through the API.
func (p *devProc) putFile(id, path, body string) int {
	p.t.Helper()
	req, _ := http.NewRequest("PUT", p.API+"/api/v1/sandboxes/"+id+"/files/"+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+p.Token)
	resp, err := p.client.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// TestCrashedEdgeHeartbeatLapses: an edge replica (here a Redis activity
// store in the test process, sharing sbx dev's prefix) holds a connection
// open and dies without releasing it. The sandbox stays awake while the
// heartbeat is fresh, then suspends once it lapses.
func TestCrashedEdgeHeartbeatLapses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	prefix := redisPrefix(t)
	p := startDev(t, filepath.Join(dir, "data"), "", "--idle-timeout", "2s",
		"--redis-url", "redis://"+redisAddr, "--redis-prefix", prefix)
	id := createReady(t, p)

	client, err := redisstore.NewClient("redis://" + redisAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	edge, err := redisstore.New(redisstore.Config{Client: client, Prefix: prefix, HeartbeatTTL: 8 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	edge.Open(id) // never closed: the replica "crashes"
	if err := edge.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	crashed := time.Now()
	edge.Halt()
	p.holdsStatus(id, "ready", 5*time.Second) // idle timeout passed, heartbeat still fresh
	p.waitStatus(id, "suspended", 30*time.Second)
	if since := time.Since(crashed); since < 8*time.Second {
		t.Fatalf("suspended %v after the crash, before the 8s heartbeat lapsed", since)
	}
}

// TestRedisUnreachable: with Redis gone, SSH and exec keep working,
// nothing is suspended (activity cannot be read), and dropped marks are
// counted.
func TestRedisUnreachable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	p := startDev(t, filepath.Join(dir, "data"), "", "--idle-timeout", "2s",
		"--redis-url", "redis://"+dead, "--activity-retry", "2s")
	id := createReady(t, p)
	target := mint(t, p, id, dir)
	out, errOut, code := runTool(t, "", "ssh", append(target.opts("-p"), target.dest(), "echo served")...)
	if code != 0 || out != "served\n" {
		t.Fatalf("ssh with Redis down: exit %d stdout %q stderr %q", code, out, errOut)
	}
	p.holdsStatus(id, "ready", 8*time.Second)
	dropped := metricValue(t, p, "sbx_activity_marks_dropped_total")
	if dropped < 1 {
		t.Fatalf("sbx_activity_marks_dropped_total = %v, want > 0", dropped)
	}
	if errs := metricValue(t, p, "sbx_idle_check_errors_total"); errs < 1 {
		t.Fatalf("sbx_idle_check_errors_total = %v, want > 0", errs)
	}
}

// metricValue reads one unlabelled series from /metrics.
func metricValue(t *testing.T, p *devProc, name string) float64 {
	t.Helper()
	for _, s := range p.scrape(t, name) {
		if len(s.labels) == 0 {
			return s.value
		}
	}
	t.Fatalf("metric %s not exported", name)
	return 0
}

// TestAccountIdleTimeoutOverride: the deployment default is 5 minutes, but
// an operator's per-account override (`sbx admin account set
// --idle-timeout`) suspends that account's sandboxes sooner.
func TestAccountIdleTimeoutOverride(t *testing.T) {
	t.Parallel()
	p := startDev(t, t.TempDir(), "")
	p.admin("account", "set", "--idle-timeout", "2s", "acct-dev")
	id := createReady(t, p)
	p.waitStatus(id, "suspended", 30*time.Second)
	p.admin("account", "set", "--idle-timeout", "0", "acct-dev")
	if code := p.call("POST", "/api/v1/sandboxes/"+id+"/exec", map[string]any{"command": "true"}, nil); code != 200 {
		t.Fatalf("exec waking the sandbox: %d", code)
	}
	p.holdsStatus(id, "ready", 6*time.Second) // back on the 5-minute default
}
