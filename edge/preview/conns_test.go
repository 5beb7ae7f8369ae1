package preview_test

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sbxedge/sbx/edge/preview"
	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/testkit/wstest"
)

// revokeWithin is how long an open connection may outlive its authority
// (issue 11: within 5 s on every replica).
const revokeWithin = 5 * time.Second

// dialWS opens a WebSocket to label through the proxy with the given
// headers and proves it relays.
func dialWS(t *testing.T, e *env, label string, hdr http.Header) *websocket.Conn {
	t.Helper()
	return wstest.Dial(t, e.addr, "http://"+e.host(label), hdr)
}

// wantPolicyClose waits up to revokeWithin for c to be closed with 1008.
func wantPolicyClose(t *testing.T, c *websocket.Conn, what string) {
	t.Helper()
	wstest.WantPolicyClose(t, c, time.Now(), what)
}

func bearer(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }

// TestRevokeClosesWebSockets is issue 11 §2 at the proxy: for each way
// authority ends, an open WebSocket is closed with 1008 once the
// invalidation arrives, and a WebSocket it did not authorise stays open.
func TestRevokeClosesWebSockets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// open dials the connection that will lose its authority.
		open func(t *testing.T, e *env) *websocket.Conn
		// end takes the authority away in "control" and returns the
		// invalidation control publishes.
		end func(e *env) edgeapi.Invalidation
	}{
		{"port removed", func(t *testing.T, e *env) *websocket.Conn {
			return dialWS(t, e, "doomed", bearer(tokenA))
		}, func(e *env) edgeapi.Invalidation {
			e.res.remove("doomed")
			return edgeapi.Invalidation{Kind: edgeapi.InvalidatePort, Label: "doomed"}
		}},
		{"port made private under a public connection", func(t *testing.T, e *env) *websocket.Conn {
			e.expose("doomed", "sbx-a", "acct-a", true, false)
			return dialWS(t, e, "doomed", nil)
		}, func(e *env) edgeapi.Invalidation {
			e.expose("doomed", "sbx-a", "acct-a", false, false)
			return edgeapi.Invalidation{Kind: edgeapi.InvalidatePort, Label: "doomed"}
		}},
		{"sandbox ended", func(t *testing.T, e *env) *websocket.Conn {
			return dialWS(t, e, "doomed", bearer(tokenA))
		}, func(e *env) edgeapi.Invalidation {
			e.res.remove("doomed") // an ended sandbox's ports resolve to nothing
			return edgeapi.Invalidation{Kind: edgeapi.InvalidateSandbox, SandboxID: "sbx-a"}
		}},
		{"sandbox suspended", func(t *testing.T, e *env) *websocket.Conn {
			return dialWS(t, e, "doomed", bearer(tokenA))
		}, func(e *env) edgeapi.Invalidation {
			e.res.set("doomed", preview.Route{SandboxID: "sbx-a", AccountID: "acct-a", Port: e.upPort})
			return edgeapi.Invalidation{Kind: edgeapi.InvalidateSandbox, SandboxID: "sbx-a"}
		}},
		{"token revoked", func(t *testing.T, e *env) *websocket.Conn {
			return dialWS(t, e, "doomed", bearer(tokenA))
		}, func(e *env) edgeapi.Invalidation {
			e.accts.revokeToken(tokenA)
			return edgeapi.Invalidation{Kind: edgeapi.InvalidateToken, AccountID: "acct-a"}
		}},
		{"member removed", func(t *testing.T, e *env) *websocket.Conn {
			e.oidc.QueueUser(user("alice"))
			ck, resp := login(t, e, "doomed", "/")
			if ck == nil {
				t.Fatalf("alice's login ended with %d, want a session cookie", resp.StatusCode)
			}
			return dialWS(t, e, "doomed", http.Header{"Cookie": {ck.Name + "=" + ck.Value}})
		}, func(e *env) edgeapi.Invalidation {
			e.accts.removeMember("alice")
			return edgeapi.Invalidation{Kind: edgeapi.InvalidateMembers}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, _ := newOIDCEnv(t)
			e.expose("doomed", "sbx-a", "acct-a", false, false)
			// A bystander: same account, another sandbox and token.
			e.expose("bystander", "sbx-b", "acct-b", false, false)
			keep := dialWS(t, e, "bystander", bearer(tokenB))
			c := tc.open(t, e)

			e.proxy.Revoke(t.Context(), tc.end(e))
			wantPolicyClose(t, c, tc.name)
			wstest.Echo(t, keep, "still here")
		})
	}
}

// TestRevokeCutsStreams: an event stream loses its connection when its
// token is revoked (there is no close frame to send: the response is
// cut, so the client sees an error, not a clean end).
func TestRevokeCutsStreams(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newTestApp())
	e.expose("stream", "sbx-a", "acct-a", false, false)
	req, _ := http.NewRequestWithContext(t.Context(), "GET", e.url("stream", "/sse"), nil)
	req.Header.Set("Authorization", "Bearer "+tokenA)
	c := e.client()
	defer c.CloseIdleConnections()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "id: 1") {
		t.Fatalf("first event: %q, %v", line, err)
	}
	e.accts.revokeToken(tokenA)
	e.proxy.Revoke(t.Context(), edgeapi.Invalidation{Kind: edgeapi.InvalidateToken, AccountID: "acct-a"})
	done := make(chan error, 1)
	go func() {
		for {
			if _, err := br.ReadString('\n'); err != nil {
				done <- err
				return
			}
		}
	}()
	select {
	case err := <-done:
		if err == nil || errors.Is(err, context.Canceled) {
			t.Errorf("stream ended with %v, want a cut connection", err)
		}
	case <-time.After(revokeWithin):
		t.Fatalf("stream still open %v after its token was revoked", revokeWithin)
	}
}

// TestRecheckBackstop: with the invalidation lost, the periodic re-check
// still ends the connection.
func TestRecheckBackstop(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newTestApp(), envOptions{recheck: 200 * time.Millisecond})
	e.expose("lost", "sbx-a", "acct-a", false, false)
	c := dialWS(t, e, "lost", bearer(tokenA))
	e.accts.revokeToken(tokenA) // and no Revoke: the message was lost
	wantPolicyClose(t, c, "lost invalidation")
}

// TestUpstreamEndRechecks: a sandbox torn down before its invalidation
// arrives drops the WebSocket from the upstream's side; the proxy asks
// control then, and a connection whose authority is gone still gets
// 1008, while one whose upstream merely went away just ends.
func TestUpstreamEndRechecks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newTestApp())
	e.expose("gone", "sbx-a", "acct-a", false, false)
	e.expose("kept", "sbx-b", "acct-b", false, false)
	gone := dialWS(t, e, "gone", bearer(tokenA))
	kept := dialWS(t, e, "kept", bearer(tokenB))

	e.res.remove("gone") // and no Revoke: the teardown was faster
	if err := gone.Write(t.Context(), websocket.MessageText, []byte("bye")); err != nil {
		t.Fatal(err)
	}
	wantPolicyClose(t, gone, "upstream ended after the port went")

	if err := kept.Write(t.Context(), websocket.MessageText, []byte("bye")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), revokeWithin)
	defer cancel()
	_, _, err := kept.Read(ctx)
	var ce websocket.CloseError
	if err == nil || (errors.As(err, &ce) && ce.Code == websocket.StatusPolicyViolation) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("upstream ended with the route intact: %v, want the connection to end without 1008", err)
	}
}
