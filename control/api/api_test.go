package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbxedge/sbx/auth/token"
	"github.com/sbxedge/sbx/control"
	"github.com/sbxedge/sbx/control/api"
	"github.com/sbxedge/sbx/control/controltest"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/testkit/apicheck"
	"github.com/sbxedge/sbx/internal/testkit/testdb"
)

// env is one in-process control plane with two accounts.
type env struct {
	t      testing.TB
	svc    *control.Service
	client *http.Client
	// tokens by name: "dev" (limit 10), "other" (limit 1), "project",
	// "disabled" (feature flag off).
	tokens map[string]string
}

func newEnv(t testing.TB, backend string, noJobs bool, opts ...func(*control.Config)) *env {
	t.Helper()
	ctx := context.Background()
	cfg := control.Config{SSHHost: "127.0.0.1", SSHPort: 2222, NoJobs: noJobs, MetricsAddr: "127.0.0.1:0",
		PreviewDomain: "preview.test", PreviewChanged: func(context.Context, edgeapi.Invalidation) error { return nil }}
	if backend == "postgres" {
		cfg.DatabaseURL = testdb.Postgres(t)
	}
	for _, o := range opts {
		o(&cfg)
	}
	svc, devTok := controltest.Start(t, cfg)
	e := &env{t: t, svc: svc, tokens: map[string]string{"dev": devTok}}
	err := svc.Store.InTx(ctx, func(tx store.Tx) error {
		for _, a := range []store.Account{
			{ID: "acct-other", Name: "other", SandboxesEnabled: true, ConcurrentLimit: 1},
			{ID: "acct-off", Name: "off", SandboxesEnabled: false, ConcurrentLimit: 1},
		} {
			a.CreatedAt = time.Now().UTC()
			if err := tx.UpsertAccount(ctx, a); err != nil {
				return err
			}
		}
		for name, spec := range map[string]struct {
			acct, prefix string
			kind         store.TokenKind
		}{
			"other":    {"acct-other", token.PrefixAgent, store.TokenAgent},
			"disabled": {"acct-off", token.PrefixAgent, store.TokenAgent},
			"project":  {"acct-other", token.PrefixProject, store.TokenProject},
		} {
			secret, hash := token.New(spec.prefix)
			e.tokens[name] = secret
			if err := tx.InsertToken(ctx, store.Token{ID: "tok-" + name, AccountID: spec.acct, Kind: spec.kind, Name: name, Hash: hash, CreatedAt: time.Now().UTC()}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	e.client = &http.Client{Transport: &apicheck.Transport{T: t, C: apicheck.New(t, api.OpenAPI())}}
	return e
}

type problemDoc struct {
	Type   string `json:"type"`
	Status int    `json:"status"`
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

// do sends a request as the named token ("" for none) and returns the
// status, headers and body.
func (e *env) do(tok, method, path string, body io.Reader, hdr ...string) (int, http.Header, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.svc.URL()+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+e.tokens[tok])
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// metrics scrapes control's metrics listener.
func (e *env) metrics() string {
	e.t.Helper()
	resp, err := http.Get("http://" + e.svc.MetricsAddr().String() + "/metrics")
	if err != nil {
		e.t.Fatalf("scrape metrics: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		e.t.Fatalf("scrape metrics: %d %s", resp.StatusCode, b)
	}
	return string(b)
}

func jsonBody(v any) io.Reader {
	b, _ := json.Marshal(v)
	return bytes.NewReader(b)
}

func TestErrorsAreProblems(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, backend, true)
			// A sandbox of account "dev" for cross-account checks.
			code, _, body := e.do("dev", "POST", "/api/v1/sandboxes", jsonBody(map[string]any{"profile": "tuist-linux-small"}))
			if code != 201 {
				t.Fatalf("create: %d %s", code, body)
			}
			var sb struct{ ID string }
			_ = json.Unmarshal(body, &sb)

			cases := []struct {
				name, tok, method, path string
				body                    string
				wantStatus              int
				wantCode                string
			}{
				{"no token", "", "GET", "/api/v1/sandboxes", "", 401, "unauthenticated"},
				{"garbage token", "", "GET", "/api/v1/sandboxes?x", "", 401, "unauthenticated"},
				{"project token", "project", "GET", "/api/v1/sandboxes", "", 403, "project_token_refused"},
				{"feature off", "disabled", "POST", "/api/v1/sandboxes", `{"profile":"tuist-linux-small"}`, 403, "feature_disabled"},
				{"other account's sandbox", "other", "GET", "/api/v1/sandboxes/" + sb.ID, "", 404, "sandbox_not_found"},
				{"other account's delete", "other", "DELETE", "/api/v1/sandboxes/" + sb.ID, "", 404, "sandbox_not_found"},
				{"unknown sandbox", "dev", "GET", "/api/v1/sandboxes/sbx-aaaaaaaaaaaaaaaaaaaaaaaaaa", "", 404, "sandbox_not_found"},
				{"unknown profile", "dev", "POST", "/api/v1/sandboxes", `{"profile":"tuist-windows-huge"}`, 422, "unknown_profile"},
				{"missing profile", "dev", "POST", "/api/v1/sandboxes", `{}`, 422, "invalid_request"},
				{"unknown field", "dev", "POST", "/api/v1/sandboxes", `{"profile":"tuist-linux-small","colour":"red"}`, 400, "malformed_json"},
				{"wrong type", "dev", "POST", "/api/v1/sandboxes", `{"profile":7}`, 422, "invalid_request"},
				{"deadline too long", "dev", "POST", "/api/v1/sandboxes", `{"profile":"tuist-linux-small","deadline_minutes":20000}`, 422, "invalid_request"},
				{"bad json", "dev", "POST", "/api/v1/sandboxes", `{"profile":`, 400, "malformed_json"},
				{"body too large", "dev", "POST", "/api/v1/sandboxes", `{"profile":"` + strings.Repeat("x", 2<<20) + `"}`, 413, "body_too_large"},
				{"exec while pending", "dev", "POST", "/api/v1/sandboxes/" + sb.ID + "/exec", `{"command":"true"}`, 409, "sandbox_state"},
				{"files while pending", "dev", "GET", "/api/v1/sandboxes/" + sb.ID + "/files/x", "", 409, "sandbox_state"},
				{"bad env name", "dev", "POST", "/api/v1/sandboxes/" + sb.ID + "/exec", `{"command":"true","env":{"A-B":"x"}}`, 422, "invalid_request"},
				{"bad usage window", "dev", "GET", "/api/v1/usage?from=yesterday", "", 400, "invalid_query"},
				{"bad limit", "dev", "GET", "/api/v1/sandboxes?limit=0", "", 400, "invalid_query"},
				{"bad cursor", "dev", "GET", "/api/v1/sandboxes?cursor=zzz", "", 400, "invalid_query"},
				{"bad status", "dev", "GET", "/api/v1/sandboxes?status=bogus", "", 400, "invalid_query"},
				{"status twice", "dev", "GET", "/api/v1/sandboxes?status=ready&status=suspended", "", 400, "invalid_query"},
				{"limit twice", "dev", "GET", "/api/v1/sandboxes?limit=2&limit=3", "", 400, "invalid_query"},
				{"from twice", "dev", "GET", "/api/v1/usage?from=2026-01-01T00:00:00Z&from=2026-02-01T00:00:00Z", "", 400, "invalid_query"},
				{"body not an object", "dev", "POST", "/api/v1/sandboxes", `[]`, 422, "invalid_request"},
				{"extend past cap", "dev", "PATCH", "/api/v1/sandboxes/" + sb.ID, `{"deadline_minutes":10081}`, 422, "invalid_request"},
				{"deadline overflowing time.Duration", "dev", "POST", "/api/v1/sandboxes", `{"profile":"tuist-linux-small","deadline_minutes":153722868}`, 422, "invalid_request"},
				{"deadline of 10^12 minutes", "dev", "POST", "/api/v1/sandboxes", `{"profile":"tuist-linux-small","deadline_minutes":1000000000000}`, 422, "invalid_request"},
				{"patch overflowing time.Duration", "dev", "PATCH", "/api/v1/sandboxes/" + sb.ID, `{"deadline_minutes":153722868}`, 422, "invalid_request"},
				{"patch shortening the deadline", "dev", "PATCH", "/api/v1/sandboxes/" + sb.ID, `{"deadline_minutes":5}`, 409, "deadline_shortened"},
				{"patch with nothing to change", "dev", "PATCH", "/api/v1/sandboxes/" + sb.ID, `{}`, 422, "invalid_request"},
				{"extend of 10^12 minutes", "dev", "PATCH", "/api/v1/sandboxes/" + sb.ID, `{"extend_minutes":1000000000000}`, 422, "invalid_request"},
				{"patch of 10^12 minutes", "dev", "PATCH", "/api/v1/sandboxes/" + sb.ID, `{"deadline_minutes":1000000000000}`, 422, "invalid_request"},
				{"unknown route", "dev", "GET", "/api/v1/nope", "", 404, "route_not_found"},
				{"metrics are not on the public API", "", "GET", "/metrics", "", 404, "route_not_found"},
				{"metrics are not on the public API with a token", "dev", "GET", "/metrics", "", 404, "route_not_found"},
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					var body io.Reader
					if c.body != "" {
						body = strings.NewReader(c.body)
					}
					tok := c.tok
					hdr := []string{}
					if c.name == "garbage token" {
						hdr = []string{"Authorization", "Basic Zm9vOmJhcg=="}
					}
					code, h, b := e.do(tok, c.method, c.path, body, hdr...)
					if code != c.wantStatus {
						t.Fatalf("%s %s: status %d, want %d; body %s", c.method, c.path, code, c.wantStatus, b)
					}
					if ct := h.Get("Content-Type"); ct != "application/problem+json" {
						t.Fatalf("content type %q, want application/problem+json", ct)
					}
					var p problemDoc
					if err := json.Unmarshal(b, &p); err != nil {
						t.Fatalf("not a problem document: %s", b)
					}
					if p.Code != c.wantCode || p.Status != c.wantStatus || !strings.HasSuffix(p.Type, "/"+c.wantCode) {
						t.Fatalf("problem = %+v, want code %q status %d", p, c.wantCode, c.wantStatus)
					}
				})
			}
		})
	}
}

// TestPatchDeadline: extend_minutes adds to the current deadline; a
// shorter deadline_minutes is refused naming the current deadline, and
// taken with allow_shorten.
func TestPatchDeadline(t *testing.T) {
	e := newEnv(t, "sqlite", true)
	type view struct {
		ID         string    `json:"id"`
		DeadlineAt time.Time `json:"deadline_at"`
	}
	send := func(method, path, body string, want int) []byte {
		t.Helper()
		code, _, b := e.do("dev", method, path, strings.NewReader(body))
		if code != want {
			t.Fatalf("%s %s %s: status %d, want %d; body %s", method, path, body, code, want, b)
		}
		return b
	}
	var sb, ext view
	_ = json.Unmarshal(send("POST", "/api/v1/sandboxes", `{"profile":"tuist-linux-small","deadline_minutes":10}`, 201), &sb)
	path := "/api/v1/sandboxes/" + sb.ID
	_ = json.Unmarshal(send("PATCH", path, `{"extend_minutes":45}`, 200), &ext)
	if want := sb.DeadlineAt.Add(45 * time.Minute); !ext.DeadlineAt.Equal(want) {
		t.Fatalf("extend_minutes 45: deadline %s, want %s", ext.DeadlineAt, want)
	}
	var p problemDoc
	_ = json.Unmarshal(send("PATCH", path, `{"deadline_minutes":45}`, 409), &p)
	if p.Code != "deadline_shortened" || !strings.Contains(p.Detail, ext.DeadlineAt.UTC().Format(time.RFC3339)) {
		t.Fatalf("shortening: %+v, want deadline_shortened naming %s", p, ext.DeadlineAt.UTC().Format(time.RFC3339))
	}
	var short view
	_ = json.Unmarshal(send("PATCH", path, `{"deadline_minutes":45,"allow_shorten":true}`, 200), &short)
	if !short.DeadlineAt.Before(ext.DeadlineAt) {
		t.Fatalf("allow_shorten: deadline %s, want before %s", short.DeadlineAt, ext.DeadlineAt)
	}
}

func TestIdempotencyKey(t *testing.T) {
	e := newEnv(t, "sqlite", true)
	body := `{"profile":"tuist-linux-small","deadline_minutes":30}`
	code1, _, b1 := e.do("dev", "POST", "/api/v1/sandboxes", strings.NewReader(body), "Idempotency-Key", "k-1")
	code2, h2, b2 := e.do("dev", "POST", "/api/v1/sandboxes", strings.NewReader(body), "Idempotency-Key", "k-1")
	if code1 != 201 || code2 != 201 {
		t.Fatalf("statuses %d, %d; want 201 twice", code1, code2)
	}
	var s1, s2 struct{ ID string }
	_ = json.Unmarshal(b1, &s1)
	_ = json.Unmarshal(b2, &s2)
	if s1.ID == "" || s1.ID != s2.ID || h2.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay gave %q (replayed=%q), want the same sandbox %q", s2.ID, h2.Get("Idempotent-Replayed"), s1.ID)
	}
	code3, _, b3 := e.do("dev", "POST", "/api/v1/sandboxes", strings.NewReader(`{"profile":"tuist-linux-medium"}`), "Idempotency-Key", "k-1")
	if code3 != 422 || !strings.Contains(string(b3), "idempotency_key_reused") {
		t.Fatalf("same key, other body: %d %s; want 422 idempotency_key_reused", code3, b3)
	}
	// The other account may use the same key independently.
	if code, _, b := e.do("other", "POST", "/api/v1/sandboxes", strings.NewReader(body), "Idempotency-Key", "k-1"); code != 201 {
		t.Fatalf("other account, same key: %d %s", code, b)
	}
}

// TestConcurrencyLimitHolds fires 20 creates at once at an account whose
// limit is 1 (and at dev, limit 10): exactly the limit passes.
func TestConcurrencyLimitHolds(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, backend, true)
			for tok, limit := range map[string]int{"other": 1, "dev": 10} {
				var wg sync.WaitGroup
				codes := make(chan int, 20)
				for range 20 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						code, _, b := e.do(tok, "POST", "/api/v1/sandboxes", strings.NewReader(`{"profile":"tuist-linux-small"}`))
						var p problemDoc
						if code == 429 && (json.Unmarshal(b, &p) != nil || !strings.HasPrefix(p.Detail, "concurrency limit reached: ")) {
							t.Errorf("429 detail %q, want the rule's words first, not the call's", p.Detail)
						}
						codes <- code
					}()
				}
				wg.Wait()
				close(codes)
				got := map[int]int{}
				for c := range codes {
					got[c]++
				}
				if got[201] != limit || got[429] != 20-limit {
					t.Fatalf("%s: statuses %v, want %d×201 and %d×429", tok, got, limit, 20-limit)
				}
			}
		})
	}
}

func TestListPaginates(t *testing.T) {
	e := newEnv(t, "sqlite", true)
	for range 5 {
		if code, _, b := e.do("dev", "POST", "/api/v1/sandboxes", strings.NewReader(`{"profile":"tuist-linux-small"}`)); code != 201 {
			t.Fatalf("create: %d %s", code, b)
		}
	}
	seen := map[string]bool{}
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("pagination does not end")
		}
		code, _, b := e.do("dev", "GET", "/api/v1/sandboxes?limit=2&cursor="+cursor, nil)
		if code != 200 {
			t.Fatalf("list: %d %s", code, b)
		}
		var page struct {
			Sandboxes  []struct{ ID string }
			NextCursor *string `json:"next_cursor"`
		}
		_ = json.Unmarshal(b, &page)
		for _, s := range page.Sandboxes {
			if seen[s.ID] {
				t.Fatalf("sandbox %s on two pages", s.ID)
			}
			seen[s.ID] = true
		}
		if page.NextCursor == nil {
			break
		}
		cursor = *page.NextCursor
	}
	if len(seen) != 5 {
		t.Fatalf("pages held %d sandboxes, want 5", len(seen))
	}
	if code, _, b := e.do("other", "GET", "/api/v1/sandboxes", nil); code != 200 || strings.Contains(string(b), `"id"`) {
		t.Fatalf("other account sees dev's sandboxes: %d %s", code, b)
	}
}

// TestSandboxRoutesAreExact: /api/v1/sandboxes/{id}/ is not the sandbox.
// It is where a client's "services/.." or "files/.." lands once its URL
// library removes dot segments; a DELETE there once destroyed the
// sandbox and answered 200.
func TestSandboxRoutesAreExact(t *testing.T) {
	e := newEnv(t, "sqlite", true)
	code, _, b := e.do("dev", "POST", "/api/v1/sandboxes", strings.NewReader(`{"profile":"tuist-linux-small"}`))
	if code != 201 {
		t.Fatalf("create: %d %s", code, b)
	}
	var sb struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	_ = json.Unmarshal(b, &sb)
	path := "/api/v1/sandboxes/" + sb.ID
	for _, method := range []string{"DELETE", "PATCH", "GET"} {
		code, hdr, b := e.do("dev", method, path+"/", strings.NewReader(`{"extend_minutes":5}`))
		var p problemDoc
		_ = json.Unmarshal(b, &p)
		if code != 404 || !strings.HasPrefix(hdr.Get("Content-Type"), "application/problem+json") || p.Code == "" {
			t.Errorf("%s %s/: %d %q %s, want a 404 problem", method, path, code, hdr.Get("Content-Type"), b)
		}
	}
	code, _, b = e.do("dev", "GET", path, nil)
	var after struct {
		Status string `json:"status"`
	}
	_ = json.Unmarshal(b, &after)
	if code != 200 || after.Status != sb.Status {
		t.Fatalf("after the trailing-slash requests: %d %s, want the sandbox as it was (%s)", code, b, sb.Status)
	}
}

// TestTypeErrorsSpeakJSON: a body of the wrong shape is told what JSON
// was expected, not a Go type name.
func TestTypeErrorsSpeakJSON(t *testing.T) {
	e := newEnv(t, "sqlite", true)
	for body, want := range map[string]string{
		`[]`:                        "the request body must be a JSON object, not an array",
		`{"profile":7}`:             "profile must be a string, not a number",
		`{"deadline_minutes":"10"}`: "deadline_minutes must be an integer, not a string",
	} {
		code, _, b := e.do("dev", "POST", "/api/v1/sandboxes", strings.NewReader(body))
		var p problemDoc
		_ = json.Unmarshal(b, &p)
		if code != 422 || p.Detail != want {
			t.Errorf("%s: %d %q, want 422 %q", body, code, p.Detail, want)
		}
	}
}

// TestMethodNotAllowedSaysAllow: a 405 names the methods the endpoint
// takes in Allow (RFC 9110, 15.5.6), with the problem document as body.
func TestMethodNotAllowedSaysAllow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", true)
	for _, c := range []struct{ method, path, want string }{
		{"PUT", "/api/v1/sandboxes", "GET, POST"},
		{"DELETE", "/api/v1/sandboxes", "GET, POST"},
		{"POST", "/api/v1/sandboxes/sbx-aaaaaaaaaaaaaaaaaaaaaaaaaa", "GET, PATCH, DELETE"},
		{"PATCH", "/api/v1/usage", "GET"},
		{"GET", "/api/v1/sandboxes/sbx-aaaaaaaaaaaaaaaaaaaaaaaaaa/ssh_tokens", "POST"},
	} {
		// Not e.do: its client checks answers against openapi.json, which
		// documents no method an endpoint refuses.
		req, err := http.NewRequest(c.method, e.svc.URL()+c.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+e.tokens["dev"])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		code, h := resp.StatusCode, resp.Header
		if got := h.Get("Allow"); code != http.StatusMethodNotAllowed || got != c.want ||
			h.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(b), `"method_not_allowed"`) {
			t.Errorf("%s %s: %d, Allow %q (want %q), %s %s", c.method, c.path, code, got, c.want, h.Get("Content-Type"), b)
		}
	}
}

// TestBodyNullIsNotAnObject: a body of null is refused as not a JSON
// object, as [] is. encoding/json reads null into a struct as nothing to
// set, so it passed for {}: a create of null made a sandbox of the
// default profile.
func TestBodyNullIsNotAnObject(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", true)
	sb := e.createDev()
	for _, c := range []struct{ method, path string }{
		{"POST", "/api/v1/sandboxes"},
		{"PATCH", "/api/v1/sandboxes/" + sb.ID},
		{"POST", "/api/v1/sandboxes/" + sb.ID + "/ssh_tokens"},
	} {
		code, _, b := e.do("dev", c.method, c.path, strings.NewReader(" null "))
		var p problemDoc
		if code != 422 || json.Unmarshal(b, &p) != nil || p.Code != "invalid_request" || !strings.Contains(p.Detail, "not null") {
			// Not the body: a 201 of ssh_tokens holds a private key.
			t.Errorf("%s %s with body null: %d %q %q, want 422 invalid_request saying the body is null", c.method, c.path, code, p.Code, p.Detail)
		}
	}
}

// TestSeveralAuthorizationHeaders: a request with more than one
// Authorization header is refused, whichever comes first. It was served
// as the first one's account, which a proxy in front, reading another,
// would not have agreed on.
func TestSeveralAuthorizationHeaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", true)
	for _, pair := range [][2]string{{"dev", "other"}, {"dev", "dev"}} {
		req, err := http.NewRequest("GET", e.svc.URL()+"/api/v1/sandboxes", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Add("Authorization", "Bearer "+e.tokens[pair[0]])
		req.Header.Add("Authorization", "Bearer "+e.tokens[pair[1]])
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var p problemDoc
		if resp.StatusCode != 401 || json.Unmarshal(b, &p) != nil || p.Code != "invalid_token" ||
			!strings.Contains(resp.Header.Get("WWW-Authenticate"), "invalid_request") {
			t.Errorf("Authorization as %s, then as %s: %d %s, want 401 invalid_token", pair[0], pair[1], resp.StatusCode, b)
		}
	}
}

// TestPutFileToAFolderPath: PUT of a path ending in / is refused; it
// wrote a file of the name without the slash and answered 201.
func TestPutFileToAFolderPath(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", false)
	id := e.createReady(t)
	code, _, b := e.do("dev", "PUT", "/api/v1/sandboxes/"+id+"/files/dir/", strings.NewReader("hi"))
	var p problemDoc
	if code != 400 || json.Unmarshal(b, &p) != nil || p.Code != "invalid_path" {
		t.Errorf("PUT files/dir/: %d %s, want 400 invalid_path", code, b)
	}
	if code, _, b := e.do("dev", "GET", "/api/v1/sandboxes/"+id+"/files/dir", nil); code != 404 {
		t.Errorf("GET files/dir after the refused PUT: %d %s, want 404", code, b)
	}
}

// TestFileNamesWithPercent: a file name holding '%' is addressed by its
// escaped form and means itself. The path after /files/ was decoded a
// second time when the URL needed no RawPath, so "a%2541" read, wrote
// and deleted "aA", and "50%25off.txt" was refused as an invalid path.
func TestFileNamesWithPercent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", false)
	id := e.createReady(t)
	files := "/api/v1/sandboxes/" + id + "/files/"
	if code, _, b := e.do("dev", "PUT", files+"aA", strings.NewReader("decoy")); code != 201 && code != 200 {
		t.Fatalf("PUT aA: %d %s", code, b)
	}
	for _, name := range []string{"50%off.txt", "a%41", "%2e%2e", "dir%2fname"} {
		u := files + url.PathEscape(name)
		if code, _, b := e.do("dev", "PUT", u, strings.NewReader(name)); code != 201 && code != 200 {
			t.Fatalf("PUT %q as %s: %d %s", name, u, code, b)
		}
		if code, _, b := e.do("dev", "GET", u, nil); code != 200 || string(b) != name {
			t.Errorf("GET %q as %s: %d %q, want 200 %q", name, u, code, b, name)
		}
		if code, _, b := e.do("dev", "DELETE", u, nil); code != 204 && code != 200 {
			t.Errorf("DELETE %q as %s: %d %s", name, u, code, b)
		}
	}
	if code, _, b := e.do("dev", "GET", files+"aA", nil); code != 200 || string(b) != "decoy" {
		t.Errorf("GET aA after the others: %d %q, want 200 \"decoy\"", code, b)
	}
	// Escaped dot segments are still dot segments.
	for _, raw := range []string{"%2e%2e/x", "a/%2E%2E/%2e%2e/x", "%2e%2e%2f%25"} {
		code, _, b := e.do("dev", "GET", files+raw, nil)
		var p problemDoc
		if code != 400 || json.Unmarshal(b, &p) != nil || p.Code != "invalid_path" {
			t.Errorf("GET files/%s: %d %s, want 400 invalid_path", raw, code, b)
		}
	}
}

// TestProblemDetailsNameTheFieldOnce: a refused field is named once, and
// the one that was wrong: "cols cols and rows must ..." named cols for a
// bad rows, and "command command and args ..." named command for a NUL in
// an argument.
func TestProblemDetailsNameTheFieldOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", false)
	id := e.createReady(t)
	for _, tc := range []struct {
		name, method, path, body string
		want                     string
	}{
		{"NUL in command", "POST", "/exec", `{"command":"a\u0000"}`, "command must not contain NUL bytes"},
		{"NUL in an argument", "POST", "/exec", `{"command":"echo","args":["a\u0000"]}`, "args must not contain NUL bytes"},
		{"rows out of range", "GET", "/exec/stream?rows=0", "", "rows must be an integer from 1 to 1000"},
		{"cols out of range", "GET", "/exec/stream?cols=1001&rows=0", "", "cols must be an integer from 1 to 1000"},
	} {
		var body io.Reader
		if tc.body != "" {
			body = strings.NewReader(tc.body)
		}
		code, _, b := e.do("dev", tc.method, "/api/v1/sandboxes/"+id+tc.path, body)
		var p problemDoc
		if code < 400 || json.Unmarshal(b, &p) != nil || p.Detail != tc.want {
			t.Errorf("%s: %d %s, want detail %q", tc.name, code, b, tc.want)
		}
	}
}
