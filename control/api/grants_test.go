package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbxedge/sbx/auth/token"
	"github.com/sbxedge/sbx/control"
	"github.com/sbxedge/sbx/control/controltest"
	"github.com/sbxedge/sbx/control/devseed"
	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/testkit/metrictest"
)

const (
	devProject   = "7c4a2b10-1d2e-4f30-8a4b-5c6d7e8f9a0b"
	otherProject = "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"
)

// addAccount stores an account with an agent token named tokName.
func (e *env) addAccount(a store.Account, tokName string) {
	e.t.Helper()
	ctx := context.Background()
	secret, hash := token.New(token.PrefixAgent)
	err := e.svc.Store.InTx(ctx, func(tx store.Tx) error {
		if err := tx.UpsertAccount(ctx, a); err != nil {
			return err
		}
		return tx.InsertToken(ctx, store.Token{ID: "tok-" + tokName, AccountID: a.ID, Kind: store.TokenAgent, Name: tokName, Hash: hash})
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.tokens[tokName] = secret
}

func (e *env) addProjects() {
	e.t.Helper()
	ctx := context.Background()
	err := e.svc.Store.InTx(ctx, func(tx store.Tx) error {
		if err := tx.UpsertProject(ctx, store.Project{ID: devProject, AccountID: devseed.AccountID, Name: "app"}); err != nil {
			return err
		}
		return tx.UpsertProject(ctx, store.Project{ID: otherProject, AccountID: "acct-other", Name: "theirs"})
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

type sandboxDoc struct {
	ID           string          `json:"id"`
	Status       string          `json:"status"`
	DeadlineAt   time.Time       `json:"deadline_at"`
	Grants       []store.Grant   `json:"grants"`
	Consumer     *store.Consumer `json:"consumer"`
	Reachability struct {
		SSH *struct {
			Host     string `json:"host"`
			Port     int    `json:"port"`
			Username string `json:"username"`
		} `json:"ssh"`
		PreviewURLs []string `json:"preview_urls"`
		Workspace   *string  `json:"workspace"`
	} `json:"reachability"`
}

func (e *env) create(tok string, body any) sandboxDoc {
	e.t.Helper()
	code, _, b := e.do(tok, "POST", "/api/v1/sandboxes", jsonBody(body))
	if code != 201 {
		e.t.Fatalf("create: %d %s", code, b)
	}
	var sb sandboxDoc
	if err := json.Unmarshal(b, &sb); err != nil {
		e.t.Fatal(err)
	}
	return sb
}

// createDev creates a sandbox of the default profile as dev.
func (e *env) createDev() sandboxDoc {
	e.t.Helper()
	return e.create("dev", map[string]string{"profile": "tuist-linux-small"})
}

type sseEvent struct {
	ID    string
	Event string
	Data  struct {
		ID       int64           `json:"id"`
		Type     string          `json:"type"`
		State    string          `json:"state"`
		Reason   *string         `json:"reason"`
		Actor    string          `json:"actor"`
		Consumer *store.Consumer `json:"consumer"`
	}
}

// openStream opens the sandbox's event stream; events arrive on the
// channel, which closes when the server ends the stream.
func (e *env) openStream(ctx context.Context, tok, id, lastEventID string) <-chan sseEvent {
	e.t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.svc.URL()+"/api/v1/sandboxes/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+e.tokens[tok])
	req.Header.Set("Accept", "text/event-stream")
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp := e.openSSE(e.t, req, "stream")
	out := make(chan sseEvent)
	go func() {
		defer close(out)
		scanSSE(resp.Body, func(f map[string]string) bool {
			if f["id"] == "" {
				return true
			}
			cur := sseEvent{ID: f["id"], Event: f["event"]}
			if err := json.Unmarshal([]byte(f["data"]), &cur.Data); err != nil {
				e.t.Errorf("stream data %q: %v", f["data"], err)
			}
			select {
			case out <- cur:
				return true
			case <-ctx.Done():
				return false
			}
		})
	}()
	return out
}

// next reads one event or fails after limit.
func next(t *testing.T, ch <-chan sseEvent, limit time.Duration) (sseEvent, bool) {
	t.Helper()
	select {
	case ev, ok := <-ch:
		return ev, ok
	case <-time.After(limit):
		t.Fatalf("no event within %s", limit)
		return sseEvent{}, false
	}
}

// TestAgentWaitsForReadyOnStream is what an agent does: create, then read
// the event stream until ready, with no polling. The events carry the
// consumer block; a reconnect with Last-Event-ID resumes after it; the
// stream ends on its own once the sandbox is terminated.
func TestAgentWaitsForReadyOnStream(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, backend, false)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			consumer := store.Consumer{Actor: "agent", Project: "tuist/hive", SessionID: "sess-42", RunID: "run-7"}
			sb := e.create("dev", map[string]any{"profile": "tuist-linux-small", "consumer": consumer})
			if sb.Consumer == nil || *sb.Consumer != consumer {
				t.Fatalf("create response consumer %+v, want %+v", sb.Consumer, consumer)
			}

			stream := e.openStream(ctx, "dev", sb.ID, "")
			var seen []string
			var pendingID string
			for {
				ev, ok := next(t, stream, 30*time.Second)
				if !ok {
					t.Fatalf("stream ended before ready; saw %v", seen)
				}
				seen = append(seen, ev.Data.State)
				if ev.Data.Consumer == nil || *ev.Data.Consumer != consumer {
					t.Fatalf("event %s consumer %+v, want %+v", ev.ID, ev.Data.Consumer, consumer)
				}
				if ev.Event != "state" || ev.ID != fmt.Sprint(ev.Data.ID) {
					t.Fatalf("event framing: id %q event %q data %+v", ev.ID, ev.Event, ev.Data)
				}
				if ev.Data.State == "pending" {
					pendingID = ev.ID
				}
				if ev.Data.State == "ready" {
					if ev.Data.Reason == nil || *ev.Data.Reason != "cold_boot" || ev.Data.Actor != "provisioner" {
						t.Fatalf("ready event %+v, want reason cold_boot by provisioner", ev.Data)
					}
					break
				}
			}
			if fmt.Sprint(seen) != "[pending ready]" {
				t.Fatalf("states %v, want [pending ready]", seen)
			}
			code, _, b := e.do("dev", "GET", "/api/v1/sandboxes/"+sb.ID, nil)
			var got sandboxDoc
			_ = json.Unmarshal(b, &got)
			if code != 200 || got.Status != "ready" {
				t.Fatalf("after the ready event: %d %s", code, b)
			}

			// Resume after pending: the first event is ready.
			resumed := e.openStream(ctx, "dev", sb.ID, pendingID)
			if ev, _ := next(t, resumed, 10*time.Second); ev.Data.State != "ready" {
				t.Fatalf("resumed after %s: first event %+v, want ready", pendingID, ev.Data)
			}

			// The JSON list holds the same, after= filters.
			code, _, b = e.do("dev", "GET", "/api/v1/sandboxes/"+sb.ID+"/events?after="+pendingID, nil)
			var list struct{ Events []struct{ State string } }
			_ = json.Unmarshal(b, &list)
			if code != 200 || len(list.Events) != 1 || list.Events[0].State != "ready" {
				t.Fatalf("events list after pending: %d %s", code, b)
			}

			if code, _, b := e.do("dev", "DELETE", "/api/v1/sandboxes/"+sb.ID, nil); code != 200 {
				t.Fatalf("delete: %d %s", code, b)
			}
			var tail []string
			for {
				ev, ok := next(t, resumed, 30*time.Second)
				if !ok {
					break
				}
				tail = append(tail, ev.Data.State+"/"+deref(ev.Data.Reason))
			}
			if fmt.Sprint(tail) != "[terminating/explicit_delete terminated/explicit_delete]" {
				t.Fatalf("after delete the stream carried %v, then should end", tail)
			}
			// Another account cannot read the stream.
			if code, _, _ := e.do("other", "GET", "/api/v1/sandboxes/"+sb.ID+"/events", nil, "Accept", "text/event-stream"); code != 404 {
				t.Fatalf("other account's stream: %d, want 404", code)
			}
		})
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// TestGrantsThroughTheAPI: grants are validated (422 naming the entry,
// nothing created), tokens land in the sandbox at the documented path
// with mode 0600, the API never shows them, introspection follows the
// sandbox (active, extended, dead after delete), and the audit rows are
// exact and scoped to the project's account.
func TestGrantsThroughTheAPI(t *testing.T) {
	e := newEnv(t, "postgres", false)
	e.addProjects()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	for _, c := range []struct {
		name, field string
		grants      []map[string]any
	}{
		{"foreign project", "grants[1].project_id", []map[string]any{
			{"project_id": devProject, "scopes": []string{"cache:read"}},
			{"project_id": otherProject, "scopes": []string{"cache:read"}}}},
		{"unknown scope", "grants[0].scopes[1]", []map[string]any{
			{"project_id": devProject, "scopes": []string{"cache:read", "admin"}}}},
	} {
		code, _, b := e.do("dev", "POST", "/api/v1/sandboxes", jsonBody(map[string]any{"profile": "tuist-linux-small", "grants": c.grants}))
		var p struct {
			Code   string `json:"code"`
			Errors []struct{ Field string }
		}
		_ = json.Unmarshal(b, &p)
		if code != 422 || p.Code != "invalid_request" || len(p.Errors) != 1 || p.Errors[0].Field != c.field {
			t.Fatalf("%s: %d %s; want 422 naming %s", c.name, code, b, c.field)
		}
	}
	if _, _, b := e.do("dev", "GET", "/api/v1/sandboxes", nil); strings.Contains(string(b), `"id"`) {
		t.Fatalf("refused creates left sandboxes: %s", b)
	}

	sb := e.create("dev", map[string]any{"profile": "tuist-linux-small", "deadline_minutes": 30, "grants": []map[string]any{
		{"project_id": devProject, "scopes": []string{"registry:write", "cache:read"}}}})
	stream := e.openStream(ctx, "dev", sb.ID, "")
	for ev, ok := next(t, stream, 30*time.Second); ev.Data.State != "ready"; ev, ok = next(t, stream, 30*time.Second) {
		if !ok {
			t.Fatal("stream ended before ready")
		}
	}
	code, _, b := e.do("dev", "GET", "/api/v1/sandboxes/"+sb.ID, nil)
	if code != 200 || strings.Contains(string(b), token.PrefixGrant) {
		t.Fatalf("GET sandbox: %d; the body must list grants without tokens: %s", code, b)
	}
	var got sandboxDoc
	_ = json.Unmarshal(b, &got)
	if len(got.Grants) != 1 || fmt.Sprint(got.Grants[0].Scopes) != "[cache:read registry:write]" {
		t.Fatalf("grants %+v, want one with [cache:read registry:write]", got.Grants)
	}
	r := got.Reachability
	if r.SSH == nil || r.SSH.Host != "127.0.0.1" || r.SSH.Port != 2222 || r.SSH.Username != sb.ID || r.Workspace == nil || r.PreviewURLs == nil {
		t.Fatalf("reachability %+v, want ssh 127.0.0.1:2222 as %s, a workspace, a preview list", r, sb.ID)
	}

	code, _, b = e.do("dev", "POST", "/api/v1/sandboxes/"+sb.ID+"/exec", jsonBody(map[string]any{
		"command": `stat -c %a "$HOME/` + lifecycle.GrantsPath + `" && cat "$HOME/` + lifecycle.GrantsPath + `"`}))
	var ex struct {
		ExitCode int    `json:"exit_code"`
		Stdout   string `json:"stdout"`
	}
	_ = json.Unmarshal(b, &ex)
	mode, doc, _ := strings.Cut(ex.Stdout, "\n")
	if code != 200 || ex.ExitCode != 0 || mode != "600" {
		t.Fatalf("reading the grants file: %d %s", code, b)
	}
	var file lifecycle.GrantsFile
	if err := json.Unmarshal([]byte(doc), &file); err != nil || len(file.Grants) != 1 {
		t.Fatalf("grants file %q: %v", doc, err)
	}
	secret := file.Grants[0].Token

	introspect := func() map[string]any {
		t.Helper()
		code, _, b := e.do("", "POST", "/api/v1/grants/introspect", jsonBody(map[string]string{"token": secret}))
		var out map[string]any
		if err := json.Unmarshal(b, &out); code != 200 || err != nil {
			t.Fatalf("introspect: %d %s", code, b)
		}
		return out
	}
	in := introspect()
	want := map[string]any{"active": true, "grant_id": file.Grants[0].ID, "sandbox_id": sb.ID, "account_id": devseed.AccountID,
		"project_id": devProject, "scopes": []any{"cache:read", "registry:write"}, "expires_at": sb.DeadlineAt.UTC().Format(time.RFC3339Nano)}
	if fmt.Sprint(in) != fmt.Sprint(want) {
		t.Fatalf("introspect:\n got  %v\n want %v", in, want)
	}

	code, _, b = e.do("dev", "PATCH", "/api/v1/sandboxes/"+sb.ID, jsonBody(map[string]int{"deadline_minutes": 120}))
	var ext sandboxDoc
	_ = json.Unmarshal(b, &ext)
	if code != 200 || !ext.DeadlineAt.After(sb.DeadlineAt) {
		t.Fatalf("extend: %d %s", code, b)
	}
	if in := introspect(); in["expires_at"] != ext.DeadlineAt.UTC().Format(time.RFC3339Nano) {
		t.Fatalf("after extend expires_at %v, want %s", in["expires_at"], ext.DeadlineAt)
	}

	// The grant token is not an API credential.
	e.tokens["grant"] = secret
	if code, _, b := e.do("grant", "GET", "/api/v1/sandboxes", nil); code != 403 || !strings.Contains(string(b), "grant_token_refused") {
		t.Fatalf("grant token on the API: %d %s", code, b)
	}

	if code, _, b := e.do("dev", "DELETE", "/api/v1/sandboxes/"+sb.ID, nil); code != 200 {
		t.Fatalf("delete: %d %s", code, b)
	}
	if in := introspect(); fmt.Sprint(in) != "map[active:false]" {
		t.Fatalf("after delete: %v, want only active:false", in)
	}
	if code, _, b := e.do("", "POST", "/api/v1/grants/introspect", jsonBody(map[string]string{"token": "sbx_gt_nope"})); code != 200 || !strings.Contains(string(b), `"active":false`) {
		t.Fatalf("garbage token: %d %s", code, b)
	}

	code, _, b = e.do("dev", "GET", "/api/v1/projects/"+devProject+"/audit", nil)
	var audit struct {
		Entries []struct {
			Message, Caller, SandboxID string
		}
	}
	_ = json.Unmarshal(b, &audit)
	wantMsg := "sandbox " + sb.ID + " received scopes [cache:read, registry:write] on project " + devProject + " via caller tok-dev-"
	if code != 200 || len(audit.Entries) != 1 || !strings.HasPrefix(audit.Entries[0].Message, wantMsg) ||
		audit.Entries[0].Message != wantMsg+strings.TrimPrefix(audit.Entries[0].Caller, "tok-dev-") {
		t.Fatalf("audit: %d %s\nwant one entry %q<token id>", code, b, wantMsg)
	}
	if code, _, b := e.do("other", "GET", "/api/v1/projects/"+devProject+"/audit", nil); code != 404 || !strings.Contains(string(b), "project_not_found") {
		t.Fatalf("other account reading dev's audit: %d %s", code, b)
	}

	metrics := e.metrics()
	if !strings.Contains(metrics, "sbx_grant_tokens_minted_total 1\n") {
		t.Fatalf("metrics lack one grant mint:\n%s", metrictest.Lines(metrics, "sbx_grant"))
	}
}

// TestAccountRulesRefuseWithTheirOwnType: flag off, platform not allowed,
// project token, grant token and limit reached each answer their own
// problem type.
func TestAccountRulesRefuseWithTheirOwnType(t *testing.T) {
	e := newEnv(t, "postgres", true)
	ctx := context.Background()
	err := e.svc.Store.InTx(ctx, func(tx store.Tx) error {
		return tx.UpsertProfile(ctx, store.Profile{Name: "tuist-macos-16-large", Platform: "macos", CPU: 8, MemoryMB: 16384, DiskGB: 100})
	})
	if err != nil {
		t.Fatal(err)
	}
	e.addAccount(store.Account{ID: "acct-linux", Name: "linux-only", SandboxesEnabled: true, ConcurrentLimit: 5, AllowedPlatforms: []string{"linux"}}, "linux")
	gt, _ := token.New(token.PrefixGrant)
	e.tokens["grant"] = gt
	// "other" has limit 1: its second create is over the limit.
	e.create("other", map[string]any{"profile": "tuist-linux-small"})
	for _, c := range []struct {
		name, tok, profile string
		status             int
		code               string
	}{
		{"flag off", "disabled", "tuist-linux-small", 403, "feature_disabled"},
		{"platform not allowed", "linux", "tuist-macos-16-large", 403, "platform_not_allowed"},
		{"project token", "project", "tuist-linux-small", 403, "project_token_refused"},
		{"grant token", "grant", "tuist-linux-small", 403, "grant_token_refused"},
		{"limit reached", "other", "tuist-linux-small", 429, "concurrency_limit"},
		{"allowed platform", "linux", "tuist-linux-small", 201, ""},
	} {
		code, h, b := e.do(c.tok, "POST", "/api/v1/sandboxes", jsonBody(map[string]string{"profile": c.profile}))
		var p problemDoc
		_ = json.Unmarshal(b, &p)
		if code != c.status || (c.code != "" && (p.Code != c.code || !strings.HasSuffix(p.Type, "/"+c.code) || h.Get("Content-Type") != "application/problem+json")) {
			t.Errorf("%s: %d %s; want %d %s", c.name, code, b, c.status, c.code)
		}
	}
	metrics := e.metrics()
	for _, rule := range []string{"feature_disabled", "platform", "concurrency"} {
		if !strings.Contains(metrics, `sbx_quota_refusals_total{rule="`+rule+`"} 1`) {
			t.Errorf("metrics lack one %s refusal:\n%s", rule, metrictest.Lines(metrics, "sbx_quota"))
		}
	}
	if !strings.Contains(metrics, `sbx_sandboxes{account="acct-other",platform="linux",state="pending"} 1`) {
		t.Errorf("metrics lack the active sandbox gauge:\n%s", metrictest.Lines(metrics, "sbx_sandboxes{"))
	}
}

// TestHundredRacingCreatesAdmitTheLimit fires 100 creates at once at an
// account whose limit is 3: exactly 3 are admitted.
func TestHundredRacingCreatesAdmitTheLimit(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, backend, true)
			e.addAccount(store.Account{ID: "acct-three", Name: "three", SandboxesEnabled: true, ConcurrentLimit: 3}, "three")
			var wg sync.WaitGroup
			codes := make(chan int, 100)
			start := make(chan struct{})
			for range 100 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					code, _, _ := e.do("three", "POST", "/api/v1/sandboxes", strings.NewReader(`{"profile":"tuist-linux-small"}`))
					codes <- code
				}()
			}
			close(start)
			wg.Wait()
			close(codes)
			got := map[int]int{}
			for c := range codes {
				got[c]++
			}
			if got[201] != 3 || got[429] != 97 {
				t.Fatalf("statuses %v, want 3×201 and 97×429", got)
			}
			n, err := e.svc.Store.Sandboxes(context.Background(), store.ListOptions{AccountID: "acct-three"})
			if err != nil || len(n) != 3 {
				t.Fatalf("stored sandboxes %d (%v), want 3", len(n), err)
			}
		})
	}
}

// TestShutdownEndsEventStreams: an open stream (here on a sandbox that
// stays pending: no job queue) does not hold control's shutdown until its
// deadline; the stream ends at once.
func TestShutdownEndsEventStreams(t *testing.T) {
	ctx := context.Background()
	svc, tok := controltest.Start(t, control.Config{NoJobs: true})
	e := &env{t: t, svc: svc, tokens: map[string]string{"dev": tok}, client: &http.Client{}}
	sb := e.create("dev", map[string]any{"profile": "tuist-linux-small"})
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream := e.openStream(sctx, "dev", sb.ID, "")
	if ev, _ := next(t, stream, 10*time.Second); ev.Data.State != "pending" {
		t.Fatalf("first event %+v, want pending", ev.Data)
	}
	start := time.Now()
	shutCtx, shutCancel := context.WithTimeout(ctx, 20*time.Second)
	defer shutCancel()
	if err := svc.Shutdown(shutCtx); err != nil {
		t.Fatalf("shutdown with an open stream: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("shutdown took %s with an open stream", took)
	}
	if _, ok := next(t, stream, 5*time.Second); ok {
		t.Fatal("the stream sent an event instead of ending")
	}
}
