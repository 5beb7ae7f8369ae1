package internalapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/previewroute"
	"github.com/sbxedge/sbx/control/sshauth"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/problem"
)

const testSecret = "0123456789abcdef0123456789abcdef-test"

// fakeSSHAuth answers by fingerprint.
type fakeSSHAuth map[string]error

func (f fakeSSHAuth) Authorize(_ context.Context, username, fp string) (sshauth.Route, error) {
	if err, ok := f[fp]; ok && err != nil {
		return sshauth.Route{}, err
	}
	if _, ok := f[fp]; !ok {
		return sshauth.Route{}, edgeapi.ErrSSHUnknownKey
	}
	return sshauth.Route{SandboxID: username, Addr: "127.0.0.1:2200", User: "sbx", HostKey: "ssh-ed25519 AAAA",
		ExpiresAt: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}, nil
}

func newTestServer(t *testing.T, deps Deps) *httptest.Server {
	t.Helper()
	s, err := New(Config{Secret: testSecret}, deps)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return ts
}

func do(t *testing.T, ts *httptest.Server, method, path, auth, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func wantProblem(t *testing.T, resp *http.Response, body []byte, status int, code string) {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d; body %s", resp.StatusCode, status, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json", ct)
	}
	var p problem.Problem
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("decode problem %s: %v", body, err)
	}
	if p.Code != code || p.Status != status || p.Type != problem.TypeBase+code {
		t.Fatalf("problem %+v, want status %d code %s", p, status, code)
	}
}

func TestSecretRequired(t *testing.T) {
	t.Parallel()
	if _, err := New(Config{Secret: "short"}, Deps{}); err == nil {
		t.Fatal("New accepted a short secret")
	}
	ts := newTestServer(t, Deps{SSHAuth: fakeSSHAuth{}})
	for name, auth := range map[string]string{
		"none":          "",
		"wrong":         "Bearer " + strings.Repeat("x", len(testSecret)),
		"prefix":        "Bearer " + testSecret[:len(testSecret)-1],
		"longer":        "Bearer " + testSecret + "x",
		"not bearer":    "Basic " + testSecret,
		"lowercase hdr": "bearer " + testSecret,
	} {
		for _, path := range []string{edgeapi.PathHealth, edgeapi.PathSSHAuthorize, "/internal/v1/nope"} {
			t.Run(name+path, func(t *testing.T) {
				resp, body := do(t, ts, http.MethodPost, path, auth, `{}`)
				wantProblem(t, resp, body, http.StatusUnauthorized, edgeapi.CodeUnauthorized)
				if resp.Header.Get("WWW-Authenticate") == "" {
					t.Error("no WWW-Authenticate header on 401")
				}
			})
		}
	}
	resp, body := do(t, ts, http.MethodGet, edgeapi.PathHealth, "Bearer "+testSecret, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("health with the secret: %d %s", resp.StatusCode, body)
	}
}

func TestSSHAuthorize(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, Deps{SSHAuth: fakeSSHAuth{
		"SHA256:good":    nil,
		"SHA256:expired": edgeapi.ErrSSHExpired,
		"SHA256:ended":   edgeapi.ErrSSHSandboxEnded,
		"SHA256:other":   edgeapi.ErrSSHWrongSandbox,
		"SHA256:nosb":    edgeapi.ErrSSHUnknownSandbox,
		"SHA256:waking":  fmt.Errorf("sandbox sb1 is suspended: %w", edgeapi.ErrSSHNotReady),
		"SHA256:broken":  errors.New("database on fire: secret detail"),
	}})
	auth := "Bearer " + testSecret
	cases := []struct {
		name   string
		body   string
		status int
		code   string
	}{
		{"unknown key", `{"username":"sb1","fingerprint":"SHA256:who"}`, 403, edgeapi.CodeSSHUnknownKey},
		{"expired", `{"username":"sb1","fingerprint":"SHA256:expired"}`, 403, edgeapi.CodeSSHExpired},
		{"ended", `{"username":"sb1","fingerprint":"SHA256:ended"}`, 403, edgeapi.CodeSSHSandboxEnded},
		{"wrong sandbox", `{"username":"sb1","fingerprint":"SHA256:other"}`, 403, edgeapi.CodeSSHWrongSandbox},
		{"unknown sandbox", `{"username":"sb1","fingerprint":"SHA256:nosb"}`, 403, edgeapi.CodeSSHUnknownSandbox},
		{"not ready", `{"username":"sb1","fingerprint":"SHA256:waking"}`, 409, edgeapi.CodeSSHNotReady},
		{"store fault", `{"username":"sb1","fingerprint":"SHA256:broken"}`, 500, edgeapi.CodeInternal},
		{"missing fields", `{"username":"sb1"}`, 400, edgeapi.CodeInvalidRequest},
		{"not json", `{"username":`, 400, edgeapi.CodeInvalidRequest},
		// The edge sends what clients said (a username): the body goes
		// through the public API's decoding path (issue 27 H1, L2).
		{"key twice, differing in case", `{"username":"sb1","USERNAME":"sb2","fingerprint":"SHA256:good"}`, 400, edgeapi.CodeInvalidRequest},
		{"nested past the limit", `{"username":` + strings.Repeat("[", 60000), 400, edgeapi.CodeInvalidRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := do(t, ts, http.MethodPost, edgeapi.PathSSHAuthorize, auth, tc.body)
			wantProblem(t, resp, body, tc.status, tc.code)
			if strings.HasPrefix(tc.name, "nested") && !strings.Contains(string(body), "deeper than") {
				t.Errorf("got %s, want the refusal to name the depth", body)
			}
			if strings.Contains(string(body), "secret detail") {
				t.Errorf("internal detail leaked: %s", body)
			}
		})
	}
	t.Run("accepted", func(t *testing.T) {
		resp, body := do(t, ts, http.MethodPost, edgeapi.PathSSHAuthorize, auth, `{"username":"sb1","fingerprint":"SHA256:good","future_field":1}`)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d, want 200; %s", resp.StatusCode, body)
		}
		var got edgeapi.SSHAuthorizeResponse
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		want := edgeapi.SSHAuthorizeResponse{SandboxID: "sb1", Addr: "127.0.0.1:2200", User: "sbx", HostKey: "ssh-ed25519 AAAA",
			ExpiresAt: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
		if !got.ExpiresAt.Equal(want.ExpiresAt) || got.SandboxID != want.SandboxID || got.Addr != want.Addr || got.User != want.User || got.HostKey != want.HostKey {
			t.Fatalf("got %+v, want %+v", got, want)
		}
	})
	t.Run("wrong method and route", func(t *testing.T) {
		resp, body := do(t, ts, http.MethodGet, edgeapi.PathSSHAuthorize, auth, "")
		wantProblem(t, resp, body, http.StatusMethodNotAllowed, "method_not_allowed")
		resp, body = do(t, ts, http.MethodPost, "/internal/v1/nope", auth, "{}")
		wantProblem(t, resp, body, http.StatusNotFound, edgeapi.CodeRouteNotFound)
	})
}

// An endpoint whose dependency is absent is not mounted.
func TestMissingDependencyUnmounts(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, Deps{})
	resp, body := do(t, ts, http.MethodPost, edgeapi.PathSSHAuthorize, "Bearer "+testSecret, `{"username":"a","fingerprint":"b"}`)
	wantProblem(t, resp, body, http.StatusNotFound, edgeapi.CodeRouteNotFound)
}

// fakePreview resolves labels from a map.
type fakePreview map[string]previewroute.Route

func (f fakePreview) Resolve(_ context.Context, label string) (previewroute.Route, error) {
	r, ok := f[label]
	if !ok {
		return previewroute.Route{}, previewroute.ErrUnknownHost
	}
	return r, nil
}

func (fakePreview) TokenAccount(context.Context, string) (string, error) {
	return "", previewroute.ErrBadToken
}

// TestPreviewRoute: the route names the sandbox's forwarder beside its
// server, and neither while it has no running server.
func TestPreviewRoute(t *testing.T) {
	t.Parallel()
	ready := previewroute.Route{SandboxID: "sb1", AccountID: "a1", Port: 3000, Access: store.AccessPrivate, HostPolicy: store.HostForward,
		State: store.StateReady, Addr: "10.0.0.7:22", User: "sbx", HostKey: "ssh-ed25519 AAAA", Workspace: "/workspace", ForwardAddr: "10.0.0.7:2223"}
	asleep := ready
	asleep.State, asleep.Addr, asleep.User, asleep.HostKey = store.StateSuspended, "", "", ""
	ts := newTestServer(t, Deps{Preview: fakePreview{"ready": ready, "asleep": asleep}})
	auth := "Bearer " + testSecret
	for _, tc := range []struct {
		label string
		want  edgeapi.PreviewRoute
	}{
		{"ready", edgeapi.PreviewRoute{SandboxID: "sb1", AccountID: "a1", Port: 3000, Access: "private", HostPolicy: "forward", State: "ready",
			Addr: "10.0.0.7:22", User: "sbx", HostKey: "ssh-ed25519 AAAA", Workspace: "/workspace", ForwardAddr: "10.0.0.7:2223"}},
		{"asleep", edgeapi.PreviewRoute{SandboxID: "sb1", AccountID: "a1", Port: 3000, Access: "private", HostPolicy: "forward", State: "suspended",
			Workspace: "/workspace"}},
	} {
		t.Run(tc.label, func(t *testing.T) {
			resp, body := do(t, ts, http.MethodPost, edgeapi.PathPreviewRoute, auth, `{"label":"`+tc.label+`"}`)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d, want 200; %s", resp.StatusCode, body)
			}
			var got edgeapi.PreviewRoute
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			if has := strings.Contains(string(body), `"forward_addr"`); has != (tc.want.ForwardAddr != "") {
				t.Errorf("body %s: forward_addr present %v, want %v", body, has, !has)
			}
		})
	}
	resp, body := do(t, ts, http.MethodPost, edgeapi.PathPreviewRoute, auth, `{"label":"nope"}`)
	wantProblem(t, resp, body, http.StatusNotFound, edgeapi.CodePreviewUnknownHost)
}
