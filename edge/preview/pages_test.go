package preview_test

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sbxedge/sbx/edge/preview"
	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/initproto"
)

// browserNav are the headers a browser sends when a person opens an
// address in a tab.
var browserNav = []string{"Sec-Fetch-Mode", "navigate", "Sec-Fetch-Dest", "document", "Sec-Fetch-Site", "none", "Accept", "text/html"}

// TestPageShowsCommandsAsCode: a page's commands are set as code, not
// printed with the backticks they are written with.
func TestPageShowsCommandsAsCode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newTestApp())
	resp, body := e.get("nosuchhost", "/", browserNav...)
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "No preview at this address") {
		t.Fatalf("navigation to an unknown host: %d %q, want the 404 page", resp.StatusCode, body)
	}
	if strings.Contains(body, "`") {
		t.Errorf("the 404 page shows a literal backtick: %q", body)
	}
	if want := "<code>sbx ports &lt;sandbox&gt;</code>"; !strings.Contains(body, want) {
		t.Errorf("the 404 page lacks %q: %q", want, body)
	}
}

// TestPortClosedPageNamesTheSandbox: the page for a port nothing listens
// on gives the command that declares a service with the sandbox's id
// filled in, on a private preview; a public one's visitors are not told
// the id.
func TestPortClosedPageNamesTheSandbox(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newTestApp())
	closed := freePort(t)
	for _, tc := range []struct {
		name, label string
		public      bool
		want, never string
	}{
		{"private", "closedpriv", false, fmt.Sprintf("<code>sbx services set sbx-a &lt;name&gt; --port %d -- &lt;command&gt;</code>", closed), "&lt;id&gt;"},
		{"public", "closedpub", true, fmt.Sprintf("<code>sbx services set &lt;id&gt; &lt;name&gt; --port %d -- &lt;command&gt;</code>", closed), "sbx-a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.expose(tc.label, "sbx-a", "acct-a", tc.public, false)
			rt, _ := e.res.Resolve(t.Context(), tc.label)
			rt.Port = closed
			e.res.set(tc.label, rt)
			resp, body := e.get(tc.label, "/", append([]string{"Authorization", "Bearer " + tokenA}, browserNav...)...)
			if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "Nothing is listening on this port") {
				t.Fatalf("navigation to a closed port: %d %q, want the 502 page", resp.StatusCode, body)
			}
			if !strings.Contains(body, tc.want) || strings.Contains(body, tc.never) {
				t.Errorf("the 502 page: want %q and never %q, got %q", tc.want, tc.never, body)
			}
			// An API client still gets the problem document.
			resp, body = e.get(tc.label, "/", "Authorization", "Bearer "+tokenA, "Accept", "application/json")
			if resp.StatusCode != http.StatusBadGateway || problemCode(t, body) != "upstream_unreachable" {
				t.Errorf("API client to a closed port: %d %s, want a 502 upstream_unreachable problem", resp.StatusCode, body)
			}
		})
	}
}

// TestWakingPageSaysWhyTruly: the waking page says the sandbox was
// suspended only when control said it was asleep; not for a first start,
// nor for a running sandbox whose service is still starting.
func TestWakingPageSaysWhyTruly(t *testing.T) {
	t.Parallel()
	appPort := freePort(t)
	gate := make(chan struct{})
	t.Cleanup(func() { close(gate) })
	waker := &gateWaker{gates: map[string]chan struct{}{"sbx-start": gate, "sbx-sleep": gate}}
	e := newEnv(t, newTestApp(), envOptions{waker: waker, wakeTimeout: time.Minute,
		sshdConfig: initStatus(t, initproto.Status{Service: initproto.Service{Name: "web", Command: "x", Port: appPort}, State: "starting"})})
	e.expose("running", "sbx-a", "acct-a", false, false)
	rt, _ := e.res.Resolve(t.Context(), "running")
	rt.Port = appPort
	e.res.set("running", rt)
	e.res.set("firststart", preview.Route{SandboxID: "sbx-start", AccountID: "acct-a", Port: appPort, Admission: edgeapi.AdmissionStarting})
	e.res.set("asleep", preview.Route{SandboxID: "sbx-sleep", AccountID: "acct-a", Port: appPort, Admission: edgeapi.AdmissionWakeable})
	for _, tc := range []struct{ label, want string }{
		{"running", "The sandbox is running"},
		{"firststart", "It is starting for the first time"},
		{"asleep", "It was suspended"},
	} {
		resp, body := e.get(tc.label, "/", append([]string{"Authorization", "Bearer " + tokenA}, browserNav...)...)
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "Waking up your sandbox") {
			t.Fatalf("%s: navigation got %d %q, want the waking page", tc.label, resp.StatusCode, body)
		}
		if !strings.Contains(body, tc.want) {
			t.Errorf("%s: the waking page lacks %q: %q", tc.label, tc.want, body)
		}
		if strings.Contains(body, "while nobody used it") {
			t.Errorf("%s: the waking page claims the sandbox was idle, which control does not say: %q", tc.label, body)
		}
	}
}

// TestEndedSandboxGetsGonePage: a preview whose sandbox ended answers
// 410 with the "this sandbox has ended" page to a browser and the
// sandbox_ended problem to an API client, not the generic 404; a label
// that never existed still answers 404.
func TestEndedSandboxGetsGonePage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newTestApp())
	e.expose("gone", "sbx-a", "acct-a", false, false)
	e.res.end("gone")
	resp, body := e.get("gone", "/", browserNav...)
	if resp.StatusCode != http.StatusGone || !strings.Contains(body, "This sandbox has ended") {
		t.Errorf("navigation to an ended sandbox's preview: %d %q, want the 410 page", resp.StatusCode, body)
	}
	resp, body = e.get("gone", "/", "Accept", "application/json")
	if resp.StatusCode != http.StatusGone || problemCode(t, body) != "sandbox_ended" {
		t.Errorf("API client to an ended sandbox's preview: %d %s, want a 410 sandbox_ended problem", resp.StatusCode, body)
	}
	// Signing in to it says the same, not that control is away.
	resp, body = e.get("", "/login?rd="+url.QueryEscape(e.url("gone", "/")), browserNav...)
	if resp.StatusCode != http.StatusGone || !strings.Contains(body, "This sandbox has ended") {
		t.Errorf("sign-in for an ended sandbox's preview: %d %q, want the 410 page", resp.StatusCode, body)
	}
	resp, body = e.get("neverwas", "/", "Accept", "application/json")
	if resp.StatusCode != http.StatusNotFound || problemCode(t, body) != "preview_not_found" {
		t.Errorf("API client to an unknown host: %d %s, want 404 preview_not_found", resp.StatusCode, body)
	}
}

// TestSignInFormRefusalIsAPage: a sign-in form whose state does not
// match (a stale tab, a replayed form) answers the browser that
// submitted it with a page, and a script with the problem document.
func TestSignInFormRefusalIsAPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newTestApp())
	post := func(hdr ...string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest("POST", e.url("", "/dev-login"), strings.NewReader(url.Values{"state": {"stale"}}.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		c := e.client()
		defer c.CloseIdleConnections()
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	for _, tc := range []struct {
		name string
		hdr  []string
	}{
		{"fetch metadata", []string{"Sec-Fetch-Mode", "navigate", "Sec-Fetch-Site", "same-origin", "Sec-Fetch-Dest", "document", "Accept", "text/html"}},
		{"Accept only", []string{"Accept", "text/html,application/xhtml+xml"}},
	} {
		resp, body := post(tc.hdr...)
		if resp.StatusCode != http.StatusBadRequest || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
			!strings.Contains(body, "That sign-in link has expired") {
			t.Errorf("%s: browser's sign-in form with a stale state: %d %s %q, want the 400 page", tc.name, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
	}
	resp, body := post("Accept", "application/json")
	if resp.StatusCode != http.StatusBadRequest || problemCode(t, body) != "login_invalid" {
		t.Errorf("script's sign-in POST with a stale state: %d %s, want a 400 login_invalid problem", resp.StatusCode, body)
	}
}
