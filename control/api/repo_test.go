package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control"
	"github.com/sbxedge/sbx/control/controltest"
	"github.com/sbxedge/sbx/control/devseed"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/testkit/closedport"
	"github.com/sbxedge/sbx/internal/testkit/gittest"
	"github.com/sbxedge/sbx/internal/testkit/sshscenario"
)

// TestCreateWithRepo clones at create from a real git server on loopback
// (git http-backend behind net/http/cgi), public and private, and checks
// each failure fails the sandbox with the reason, and that the token of
// the private one is nowhere it must not be: database rows and job
// arguments, events, logs, the workspace and the sandbox's home.
func TestCreateWithRepo(t *testing.T) {
	token := "sbxtok_" + strings.ReplaceAll(time.Now().Format("150405.000000000"), ".", "")
	gs := gittest.Start(t, token)
	pub := gs.Create(t, gittest.Repo{
		Path: "public/app.git", DefaultBranch: "main",
		Branches: map[string][]gittest.Commit{
			"main":    {{"README.md": "main 1"}, {"README.md": "main 2"}, {"README.md": "main 3"}},
			"feature": {{"feature.txt": "f1"}, {"feature.txt": "f2"}, {"feature.txt": "f3"}},
		},
		Tags: map[string]string{"v1": "main"},
	})
	mainParent := gittest.Git(t, filepath.Join(gs.Root, "public", "app.git"), "rev-parse", "main~1")
	priv := gs.Create(t, gittest.Repo{
		Path: "private/secret.git", DefaultBranch: "trunk",
		Branches: map[string][]gittest.Commit{"trunk": {{"secret.txt": "private contents"}}},
	})
	closed := closedPort(t)

	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			logs := &sshscenario.SyncBuffer{}
			var cfg control.Config
			e := newEnv(t, backend, false, func(c *control.Config) {
				c.Logger = debugLogger(logs)
				c.DataDir = t.TempDir()
				cfg = *c
			})
			e.liftLimit(t)

			t.Run("refused", func(t *testing.T) {
				for _, c := range []struct {
					name, field string
					repo        map[string]any
				}{
					{"file url", "repo.url", map[string]any{"url": "file:///etc"}},
					{"local path", "repo.url", map[string]any{"url": "/srv/repo.git"}},
					{"scp-like", "repo.url", map[string]any{"url": "git@github.com:o/r.git"}},
					{"ssh", "repo.url", map[string]any{"url": "ssh://git@github.com/o/r.git"}},
					{"ext transport", "repo.url", map[string]any{"url": "ext::sh -c touch% /tmp/x"}},
					{"credentials in url", "repo.url", map[string]any{"url": "https://u:p@github.com/o/r.git"}},
					{"no url", "repo.url", map[string]any{"ref": "main"}},
					{"option as ref", "repo.ref", map[string]any{"url": pub, "ref": "--upload-pack=touch /tmp/x"}},
					{"revision expression", "repo.ref", map[string]any{"url": pub, "ref": "main..feature"}},
					{"negative depth", "repo.depth", map[string]any{"url": pub, "depth": -1}},
					{"huge depth", "repo.depth", map[string]any{"url": pub, "depth": 2_000_000}},
					{"token over http", "repo.token", map[string]any{"url": "http://example.com/o/r.git", "token": "x"}},
					{"token over git://", "repo.token", map[string]any{"url": "git://example.com/o/r.git", "token": "x"}},
				} {
					code, _, b := e.do("dev", "POST", "/api/v1/sandboxes",
						jsonBody(map[string]any{"profile": "tuist-linux-small", "repo": c.repo}))
					var p struct {
						Errors []struct{ Field string } `json:"errors"`
					}
					_ = json.Unmarshal(b, &p)
					if code != 422 || len(p.Errors) != 1 || p.Errors[0].Field != c.field {
						t.Errorf("%s: got %d %s, want 422 naming %s", c.name, code, b, c.field)
					}
				}
			})

			type want struct {
				reason string // end reason; "" for ready
				branch string // HEAD's branch, or "HEAD" when detached
				head   string // HEAD's commit, when known
				count  int    // commits in HEAD's history, when known
				file   [2]string
			}
			cases := []struct {
				name string
				repo map[string]any
				want want
			}{
				{"branch with depth", map[string]any{"url": pub, "ref": "feature", "depth": 2},
					want{branch: "feature", count: 2, file: [2]string{"feature.txt", "f3"}}},
				{"default branch", map[string]any{"url": pub},
					want{branch: "main", count: 3, file: [2]string{"README.md", "main 3"}}},
				{"tag", map[string]any{"url": pub, "ref": "v1", "depth": 1},
					want{branch: "HEAD", count: 1, file: [2]string{"README.md", "main 3"}}},
				{"commit", map[string]any{"url": pub, "ref": mainParent, "depth": 1},
					want{branch: "HEAD", head: mainParent, count: 1, file: [2]string{"README.md", "main 2"}}},
				{"private with token", map[string]any{"url": priv, "token": token},
					want{branch: "trunk", count: 1, file: [2]string{"secret.txt", "private contents"}}},
				{"private, wrong token", map[string]any{"url": priv, "token": "not-" + token}, want{reason: "repo_auth_failed"}},
				{"private, no token", map[string]any{"url": priv}, want{reason: "repo_auth_failed"}},
				{"unknown ref", map[string]any{"url": pub, "ref": "no-such-branch"}, want{reason: "repo_unknown_ref"}},
				{"unknown repository", map[string]any{"url": gs.URL + "/public/missing.git"}, want{reason: "repo_not_found"}},
				{"unreachable host", map[string]any{"url": "http://" + closed + "/o/r.git"}, want{reason: "repo_unreachable"}},
			}
			ids := make([]string, len(cases))
			for i, c := range cases {
				code, _, b := e.do("dev", "POST", "/api/v1/sandboxes",
					jsonBody(map[string]any{"profile": "tuist-linux-small", "repo": c.repo}))
				if code != 201 {
					t.Fatalf("%s: create: %d %s", c.name, code, b)
				}
				if strings.Contains(string(b), token) {
					t.Errorf("%s: the create's answer holds the token: %s", c.name, b)
				}
				var sb sandboxDoc
				_ = json.Unmarshal(b, &sb)
				ids[i] = sb.ID
			}
			for i, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					status, reason := e.waitSettled(t, ids[i])
					if c.want.reason != "" {
						if status != "failed" || reason != c.want.reason {
							t.Fatalf("got %s (%s), want failed (%s); events: %s", status, reason, c.want.reason, e.eventsBody(t, ids[i]))
						}
					} else if status != "ready" {
						t.Fatalf("got %s (%s), want ready; events: %s", status, reason, e.eventsBody(t, ids[i]))
					}
					e.checkCloneEvents(t, ids[i], c.want.reason)
					if c.want.reason != "" {
						return
					}
					if got := e.execOut(t, ids[i], "git", "rev-parse", "--abbrev-ref", "HEAD"); got != c.want.branch {
						t.Errorf("HEAD's branch: got %q, want %q", got, c.want.branch)
					}
					if c.want.head != "" {
						if got := e.execOut(t, ids[i], "git", "rev-parse", "HEAD"); got != c.want.head {
							t.Errorf("HEAD: got %s, want %s", got, c.want.head)
						}
					}
					if got := e.execOut(t, ids[i], "git", "rev-list", "--count", "HEAD"); got != fmt.Sprint(c.want.count) {
						t.Errorf("commits in history: got %s, want %d", got, c.want.count)
					}
					if got := e.execOut(t, ids[i], "cat", c.want.file[0]); got != c.want.file[1] {
						t.Errorf("%s: got %q, want %q", c.want.file[0], got, c.want.file[1])
					}
					if got := e.execOut(t, ids[i], "git", "remote", "get-url", "origin"); got != c.repo["url"] {
						t.Errorf("origin: got %q, want %q", got, c.repo["url"])
					}
					if c.want.branch != "HEAD" {
						if got := e.execOut(t, ids[i], "git", "rev-parse", "--abbrev-ref", "@{upstream}"); got != "origin/"+c.want.branch {
							t.Errorf("upstream: got %q, want origin/%s", got, c.want.branch)
						}
					}
					if cfgText := e.execOut(t, ids[i], "cat", ".git/config"); strings.Contains(cfgText, token) || strings.Contains(cfgText, "helper") {
						t.Errorf(".git/config keeps a credential:\n%s", cfgText)
					}
				})
			}

			// Where the token must not be.
			for i := range ids {
				if b := e.eventsBody(t, ids[i]); strings.Contains(b, token) {
					t.Errorf("events of %s hold the token: %s", cases[i].name, b)
				}
				if _, _, b := e.do("dev", "GET", "/api/v1/sandboxes/"+ids[i], nil); strings.Contains(string(b), token) {
					t.Errorf("sandbox %s shows the token: %s", cases[i].name, b)
				}
			}
			if strings.Contains(logs.String(), token) {
				t.Errorf("control logged the token:\n%s", logs.String())
			}
			// The data directory holds the SQLite database (rows, job
			// arguments, its WAL) and every sandbox's workspace and home.
			assertNoTokenUnder(t, cfg.DataDir, token)
			if backend == "postgres" {
				out, err := exec.Command("pg_dump", "--data-only", cfg.DatabaseURL).Output()
				if err != nil {
					t.Fatalf("pg_dump: %v", err)
				}
				if !bytes.Contains(out, []byte("repo_clone")) {
					t.Fatalf("pg_dump holds no clone event: the dump is not of this test's database")
				}
				if bytes.Contains(out, []byte(token)) {
					t.Errorf("the database holds the token")
				}
			}
		})
	}
}

// liftLimit lets the dev account run every case's sandbox at once.
func (e *env) liftLimit(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	err := e.svc.Store.InTx(ctx, func(tx store.Tx) error {
		a, err := tx.Account(ctx, devseed.AccountID)
		if err != nil {
			return err
		}
		a.ConcurrentLimit = 100
		return tx.UpsertAccount(ctx, a)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitSettled polls until the sandbox is ready or failed.
func (e *env) waitSettled(t *testing.T, id string) (status, reason string) {
	t.Helper()
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var sb struct {
			Status    string  `json:"status"`
			EndReason *string `json:"end_reason"`
		}
		_, _, b := e.do("dev", "GET", "/api/v1/sandboxes/"+id, nil)
		_ = json.Unmarshal(b, &sb)
		if sb.Status == "ready" || sb.Status == "failed" {
			if sb.EndReason != nil {
				reason = *sb.EndReason
			}
			return sb.Status, reason
		}
	}
	t.Fatalf("sandbox %s neither ready nor failed after 90 s", id)
	return "", ""
}

func (e *env) eventsBody(t *testing.T, id string) string {
	t.Helper()
	code, _, b := e.do("dev", "GET", "/api/v1/sandboxes/"+id+"/events", nil)
	if code != 200 {
		t.Fatalf("events: %d %s", code, b)
	}
	return string(b)
}

// checkCloneEvents wants a repo_clone "started" and then one ending it:
// "cloned", or the failure's reason, which the failed state repeats.
func (e *env) checkCloneEvents(t *testing.T, id, failReason string) {
	t.Helper()
	var list struct {
		Events []struct {
			Type    string  `json:"type"`
			State   *string `json:"state"`
			Reason  *string `json:"reason"`
			Message *string `json:"message"`
		} `json:"events"`
	}
	body := e.eventsBody(t, id)
	_ = json.Unmarshal([]byte(body), &list)
	var clone []string
	failedWhy := ""
	for _, ev := range list.Events {
		if ev.Type == "repo_clone" && ev.Reason != nil {
			clone = append(clone, *ev.Reason)
		}
		if ev.Type == "state" && ev.State != nil && *ev.State == "failed" && ev.Message != nil {
			failedWhy = *ev.Message
		}
	}
	end := "cloned"
	if failReason != "" {
		end = failReason
	}
	if len(clone) != 2 || clone[0] != "started" || clone[1] != end {
		t.Errorf("repo_clone events: got %q, want [started %s]; all: %s", clone, end, body)
	}
	if failReason != "" && failedWhy == "" {
		t.Errorf("the failed state event says nothing of why: %s", body)
	}
}

// execOut runs argv in the sandbox's workspace and returns its trimmed
// stdout, failing on a non-zero exit.
func (e *env) execOut(t *testing.T, id string, argv ...string) string {
	t.Helper()
	code, _, b := e.do("dev", "POST", "/api/v1/sandboxes/"+id+"/exec", jsonBody(map[string]any{"command": argv[0], "args": argv[1:]}))
	var res struct {
		Stdout   string `json:"stdout"`
		Stderr   string `json:"stderr"`
		ExitCode int    `json:"exit_code"`
	}
	_ = json.Unmarshal(b, &res)
	if code != 200 || res.ExitCode != 0 {
		t.Fatalf("exec %q: %d %s", argv, code, b)
	}
	return strings.TrimSpace(res.Stdout)
}

func assertNoTokenUnder(t *testing.T, dir, token string) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		// A directory or file gone while the walk runs (a sandbox's
		// workspace cleaned up under it: make race once saw a .git
		// vanish) holds no token any more.
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		n++
		if bytes.Contains(b, []byte(token)) {
			t.Errorf("%s holds the token", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatalf("no files under %s: nothing was checked", dir)
	}
}

// privateRepo serves a repository that needs token, with secret.txt on
// its main branch, and returns its URL.
func privateRepo(t *testing.T, token string) string {
	t.Helper()
	return gittest.Start(t, token).Create(t, gittest.Repo{
		Path: "private/secret.git", DefaultBranch: "main",
		Branches: map[string][]gittest.Commit{"main": {{"secret.txt": "private contents"}}},
	})
}

// debugLogger logs everything, the debug level included, to w.
func debugLogger(w *sshscenario.SyncBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// closedPort is a loopback address nothing listens on, nor can while the
// test runs.
func closedPort(t *testing.T) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", closedport.New(t).N)
}

// TestRepoTokenStaysWithItsReplica: with two control replicas working one
// Postgres queue, the provisioning of a create that carries a token runs
// on the replica that took the create, the only one holding the token.
func TestRepoTokenStaysWithItsReplica(t *testing.T) {
	const token = "sbxtok_replica_only"
	priv := privateRepo(t, token)
	var dbURL string
	a := newEnv(t, "postgres", false, func(c *control.Config) { dbURL = c.DatabaseURL })
	a.liftLimit(t)
	b, bTok := controltest.Start(t, control.Config{DatabaseURL: dbURL})
	bEnv := &env{t: t, svc: b, client: http.DefaultClient, tokens: map[string]string{"dev": bTok}}

	const n = 8
	ids := make([]string, n)
	for i := range ids {
		code, _, body := bEnv.do("dev", "POST", "/api/v1/sandboxes",
			jsonBody(map[string]any{"profile": "tuist-linux-small", "repo": map[string]any{"url": priv, "token": token}}))
		if code != 201 {
			t.Fatalf("create on replica b: %d %s", code, body)
		}
		var sb sandboxDoc
		_ = json.Unmarshal(body, &sb)
		ids[i] = sb.ID
	}
	for _, id := range ids {
		if status, reason := a.waitSettled(t, id); status != "ready" {
			t.Errorf("%s: got %s (%s), want ready; events: %s", id, status, reason, a.eventsBody(t, id))
		}
	}
}

// TestMCPCreateWithRepo: create_sandbox takes the repository like REST,
// and wait_sandbox_ready's refusal says why a clone failed.
func TestMCPCreateWithRepo(t *testing.T) {
	const token = "sbxtok_through_mcp"
	priv := privateRepo(t, token)
	logs := &sshscenario.SyncBuffer{}
	e := newEnv(t, "sqlite", false, func(c *control.Config) { c.Logger = debugLogger(logs) })
	s := e.mcpSession(t, "Bearer "+e.tokens["dev"], nil)

	sb, isErr := call(t, s, "create_sandbox", map[string]any{"profile": "tuist-linux-small",
		"repo": map[string]any{"url": priv, "token": token, "depth": 1}})
	id, _ := sb["id"].(string)
	if isErr || id == "" {
		t.Fatalf("create_sandbox: %v", sb)
	}
	if got, isErr := call(t, s, "wait_sandbox_ready", map[string]any{"sandbox_id": id}); isErr || got["status"] != "ready" {
		t.Fatalf("wait_sandbox_ready: %v", got)
	}
	if got, isErr := call(t, s, "read_sandbox_file", map[string]any{"sandbox_id": id, "path": "secret.txt"}); isErr || got["content"] != "private contents" {
		t.Fatalf("read the cloned file: %v", got)
	}

	sb, _ = call(t, s, "create_sandbox", map[string]any{"profile": "tuist-linux-small",
		"repo": map[string]any{"url": priv, "token": "wrong"}})
	id, _ = sb["id"].(string)
	got, isErr := call(t, s, "wait_sandbox_ready", map[string]any{"sandbox_id": id})
	detail, _ := got["detail"].(string)
	if !isErr || !strings.Contains(detail, "repo_auth_failed") || !strings.Contains(detail, "Authentication failed") {
		t.Fatalf("wait_sandbox_ready on a failed clone: %v, want a tool error naming repo_auth_failed and git's words", got)
	}
	if strings.Contains(logs.String(), token) {
		t.Errorf("control logged the token")
	}
}
