package preview_test

import (
	"context"
	"crypto/rand"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sbxedge/sbx/edge/preview"
	"github.com/sbxedge/sbx/edge/preview/redistickets"
	"github.com/sbxedge/sbx/internal/podssh"
)

// redisTickets is one replica's ticket record in the shared test Redis,
// under prefix; the keys are removed when the test ends.
func redisTickets(t *testing.T, prefix string) preview.Tickets {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	if err := rdb.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("Redis at 127.0.0.1:6379 is required: %v", err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := rdb.Keys(ctx, prefix+"*").Result()
		if len(keys) > 0 {
			_ = rdb.Del(ctx, keys...).Err()
		}
		_ = rdb.Close()
	})
	return redistickets.New(rdb, prefix)
}

var stateField = regexp.MustCompile(`name="state" value="([^"]+)"`)

// devTicket signs in through the dev form of e and returns the ticket
// redirect's path and query (on the preview host), unredeemed.
func devTicket(t *testing.T, e *env, label string) string {
	t.Helper()
	resp, body := e.get("", "/login?rd="+url.QueryEscape(e.url(label, "/landing")))
	m := stateField.FindStringSubmatch(body)
	if resp.StatusCode != 200 || m == nil || len(resp.Cookies()) != 1 {
		t.Fatalf("dev login page: %d %q", resp.StatusCode, body)
	}
	resp = devPost(t, e, resp.Cookies()[0], m[1], "")
	loc, err := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusFound || err != nil || loc.Path != "/__sbx_preview/ticket" {
		t.Fatalf("dev sign-in: %d Location %q, want a ticket redirect", resp.StatusCode, resp.Header.Get("Location"))
	}
	return loc.RequestURI()
}

// devPost submits the dev sign-in form; fetchSite, if set, is the
// browser's Sec-Fetch-Site.
func devPost(t *testing.T, e *env, login *http.Cookie, state, fetchSite string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", e.url("", "/dev-login"), strings.NewReader(url.Values{"state": {state}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if fetchSite != "" {
		req.Header.Set("Sec-Fetch-Site", fetchSite)
	}
	req.AddCookie(login)
	c := e.client()
	defer c.CloseIdleConnections()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// TestTicketOnceAcrossReplicas runs two proxy replicas sharing a session
// key and a real Redis: a ticket redeemed on one is refused on the other,
// with the same answer a forged ticket gets, and of concurrent
// redemptions on both exactly one wins.
func TestTicketOnceAcrossReplicas(t *testing.T) {
	t.Parallel()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	prefix := "sbxtest:preview-tickets:" + rand.Text() + ":"
	r1 := newEnv(t, newTestApp(), envOptions{key: key, tickets: redisTickets(t, prefix)})
	r2 := newEnv(t, newTestApp(), envOptions{key: key, tickets: redisTickets(t, prefix)})
	for _, e := range []*env{r1, r2} {
		e.expose("devpage", "sbx-a", "acct-a", false, false)
	}

	tk := devTicket(t, r1, "devpage")
	resp, _ := r2.get("devpage", tk)
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/landing" || len(resp.Cookies()) != 1 {
		t.Fatalf("ticket on the other replica: %d Location %q cookies %v, want a session and /landing", resp.StatusCode, resp.Header.Get("Location"), resp.Cookies())
	}
	forged, forgedBody := r1.get("devpage", "/__sbx_preview/ticket?t=e30.AAAA")
	for name, e := range map[string]*env{"issuing replica": r1, "redeeming replica": r2} {
		resp, body := e.get("devpage", tk)
		if resp.StatusCode != http.StatusBadRequest || problemCode(t, body) != "login_invalid" || len(resp.Cookies()) != 0 {
			t.Errorf("replayed ticket on the %s: %d %s cookies %v, want 400 login_invalid and no cookie", name, resp.StatusCode, body, resp.Cookies())
		}
		// Nothing tells a replay from a forgery.
		if resp.StatusCode != forged.StatusCode || body != forgedBody {
			t.Errorf("replay answer %d %q differs from a forged ticket's %d %q", resp.StatusCode, body, forged.StatusCode, forgedBody)
		}
	}

	tk = devTicket(t, r2, "devpage")
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := range 8 {
		e := []*env{r1, r2}[i%2]
		wg.Go(func() {
			req, _ := http.NewRequest("GET", e.url("devpage", tk), nil)
			c := e.client()
			defer c.CloseIdleConnections()
			resp, err := c.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusFound {
				mu.Lock()
				won++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if won != 1 {
		t.Errorf("8 concurrent redemptions on 2 replicas: %d succeeded, want exactly 1", won)
	}
}

// TestDevSignInRefusesCrossOrigin: a sibling preview's page (same site,
// other origin) cannot submit the dev sign-in form even with the
// victim's login cookie and the right state; the same form from the
// login page's own origin signs in.
func TestDevSignInRefusesCrossOrigin(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newTestApp())
	e.expose("devpage", "sbx-a", "acct-a", false, false)
	resp, body := e.get("", "/login?rd="+url.QueryEscape(e.url("devpage", "/")))
	m := stateField.FindStringSubmatch(body)
	if m == nil || len(resp.Cookies()) != 1 {
		t.Fatalf("dev login page: %d %q", resp.StatusCode, body)
	}
	for _, site := range []string{"same-site", "cross-site"} {
		if resp := devPost(t, e, resp.Cookies()[0], m[1], site); resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Location") != "" {
			t.Errorf("dev sign-in POST with Sec-Fetch-Site %s: %d Location %q, want 400", site, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	// The wrong state is refused even from the right origin.
	if resp := devPost(t, e, resp.Cookies()[0], "x"+m[1], "same-origin"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("dev sign-in with a wrong state: %d, want 400", resp.StatusCode)
	}
	if resp := devPost(t, e, resp.Cookies()[0], m[1], "same-origin"); resp.StatusCode != http.StatusFound {
		t.Errorf("dev sign-in from its own origin: %d, want 302 to a ticket", resp.StatusCode)
	}
}

// TestDevSignInExcludesOIDC: a proxy with a real issuer can never also
// offer the dev sign-in (which would let anyone past the provider).
func TestDevSignInExcludesOIDC(t *testing.T) {
	t.Parallel()
	cfg := preview.DefaultConfig()
	cfg.Domain, cfg.Resolver, cfg.Pods, cfg.Accounts = domain, &fakeResolver{}, podssh.NewPool(nil, nil), &fakeAccounts{}
	cfg.SessionKey = make([]byte, 32)
	cfg.OIDC = &preview.OIDCConfig{Issuer: "https://issuer.example", ClientID: "c"}
	cfg.DevSignIn = &preview.DevSignIn{AccountID: "a", User: "dev"}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "exclusive") {
		t.Errorf("OIDC and DevSignIn together: %v, want refused", err)
	}
}
