package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sbxedge/sbx/auth/token"
	"github.com/sbxedge/sbx/control"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/testkit/redistest"
)

// endBudget is how soon a stream must end once its authority went: the
// state change or revocation is applied in-process, or (tokens) found by
// control's once-a-second revocation watcher.
const endBudget = 2 * time.Second

// streamEndCase ends the authority of a stream open on sandbox id as the
// token "dev2".
type streamEndCase struct {
	name string
	end  func(t *testing.T, e *env, id string)
	code string // the problem code the client is told
	// budget is endBudget plus what the cause itself waits (the token
	// watcher's poll period).
	budget time.Duration
}

var streamEndCases = []streamEndCase{
	{name: "sandbox deleted", code: "sandbox_ended", budget: endBudget, end: func(t *testing.T, e *env, id string) {
		if code, _, b := e.do("dev", "DELETE", "/api/v1/sandboxes/"+id, nil); code != http.StatusAccepted && code != http.StatusOK {
			t.Fatalf("delete: %d %s", code, b)
		}
	}},
	{name: "sandbox suspended", code: "sandbox_suspended", budget: endBudget, end: func(t *testing.T, e *env, id string) {
		if err := e.svc.Life.Suspend(context.Background(), id, "test"); err != nil {
			t.Fatal(err)
		}
	}},
	{name: "token revoked", code: "token_revoked", budget: endBudget + time.Second, end: func(t *testing.T, e *env, _ string) {
		e.revokeDev2(t)
	}},
}

// revokeDev2 revokes the token addDevToken gave.
func (e *env) revokeDev2(t *testing.T) {
	t.Helper()
	err := e.svc.Store.InTx(context.Background(), func(tx store.Tx) error {
		return tx.RevokeToken(context.Background(), "tok-dev2", time.Now().UTC())
	})
	if err != nil {
		t.Fatal(err)
	}
}

// addDevToken gives the dev account a second token, "dev2", so one can be
// revoked while the test still acts as the other.
func (e *env) addDevToken(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	acct, _, err := e.svc.Store.AccountByTokenHash(ctx, token.Hash(e.tokens["dev"]), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	secret, hash := token.New(token.PrefixAgent)
	err = e.svc.Store.InTx(ctx, func(tx store.Tx) error {
		return tx.InsertToken(ctx, store.Token{ID: "tok-dev2", AccountID: acct.ID, Kind: store.TokenAgent,
			Name: "dev2", Hash: hash, CreatedAt: time.Now().UTC()})
	})
	if err != nil {
		t.Fatal(err)
	}
	e.tokens["dev2"] = secret
}

// waitGone waits until the process whose PID the command wrote to file in
// sandbox id has ended.
func (e *env) waitGone(t *testing.T, id, file string) {
	t.Helper()
	body := `{"command":"kill -0 $(cat ` + file + `) 2>/dev/null && echo alive || echo gone"}`
	for deadline := time.Now().Add(endBudget); ; time.Sleep(50 * time.Millisecond) {
		code, _, b := e.do("dev", "POST", "/api/v1/sandboxes/"+id+"/exec", strings.NewReader(body))
		if code == http.StatusOK && strings.Contains(string(b), "gone") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stream's command still runs %v after its stream ended: %d %s", endBudget, code, b)
		}
	}
}

// TestStreamsEndWithAuthority: a terminal stream open when its sandbox is
// deleted or suspended, or its token revoked, ends within the budget with
// close code 1008, the reason, and a last error message naming it; when
// the sandbox lives on, its command is gone too.
func TestStreamsEndWithAuthority(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", false)
	e.addDevToken(t)
	hdr := http.Header{"Authorization": {"Bearer " + e.tokens["dev2"]}}
	for _, tc := range streamEndCases {
		t.Run(tc.name, func(t *testing.T) {
			id := e.createReady(t)
			p, _, err := e.dialPty(t, id, "command="+url.QueryEscape("echo $$ > pty.pid; echo started; exec sleep 600"), hdr)
			if err != nil {
				t.Fatal(err)
			}
			p.waitFor(0, "started")
			start := time.Now()
			tc.end(t, e, id)
			select {
			case <-p.done:
			case <-time.After(tc.budget):
				t.Fatalf("terminal stream still open %v after %s", tc.budget, tc.name)
			}
			took := time.Since(start)
			var ce websocket.CloseError
			if !errors.As(p.end, &ce) || ce.Code != websocket.StatusPolicyViolation || ce.Reason != tc.code {
				t.Fatalf("stream ended with %v, want close 1008 %q", p.end, tc.code)
			}
			p.mu.Lock()
			last := p.exit
			p.mu.Unlock()
			if prob, _ := last["problem"].(map[string]any); last["type"] != "error" || prob["code"] != tc.code {
				t.Fatalf("last message %v, want an error with problem code %s", last, tc.code)
			}
			t.Logf("%s: terminal stream closed %v after", tc.name, took.Round(time.Millisecond))
			if tc.code == "token_revoked" {
				e.waitGone(t, id, "pty.pid")
			}
			if tc.code != "sandbox_ended" {
				e.do("dev", "DELETE", "/api/v1/sandboxes/"+id, nil) // frees the account's slot
			}
		})
	}
}

// TestExecStreamEndsWithAuthority: the same for the streaming exec, whose
// last event is an "error" carrying the problem.
func TestExecStreamEndsWithAuthority(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", false)
	e.addDevToken(t)
	for _, tc := range streamEndCases {
		t.Run(tc.name, func(t *testing.T) {
			id := e.createReady(t)
			events, _ := e.startExecStreamAs(t, "dev2", id, `{"command":"echo $$ > sse.pid; echo started; exec sleep 600"}`, false)
			if ev := nextEvent(t, events); ev.name != "stdout" {
				t.Fatalf("first event %s %s, want stdout", ev.name, ev.data)
			}
			start := time.Now()
			tc.end(t, e, id)
			wantEndedWith(t, events, tc)
			t.Logf("%s: exec stream ended %v after", tc.name, time.Since(start).Round(time.Millisecond))
			if tc.code == "token_revoked" {
				e.waitGone(t, id, "sse.pid")
			}
			if tc.code != "sandbox_ended" {
				e.do("dev", "DELETE", "/api/v1/sandboxes/"+id, nil)
			}
		})
	}
}

// TestStreamEndsThroughRedis: with Redis, control hears invalidations on
// the channel every replica publishes to, not in-process; a terminal
// stream still ends at once when its sandbox is deleted.
func TestStreamEndsThroughRedis(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	e := newEnv(t, "sqlite", false, func(c *control.Config) {
		c.RedisURL = r.URL()
		c.PreviewChanged = nil // published on Redis
	})
	id := e.createReady(t)
	p, _, err := e.dialPty(t, id, "command=sh", http.Header{"Authorization": {"Bearer " + e.tokens["dev"]}})
	if err != nil {
		t.Fatal(err)
	}
	p.send("echo started\n")
	p.waitFor(0, "started")
	start := time.Now()
	streamEndCases[0].end(t, e, id)
	select {
	case <-p.done:
	case <-time.After(endBudget):
		t.Fatalf("terminal stream still open %v after the sandbox was deleted", endBudget)
	}
	var ce websocket.CloseError
	if !errors.As(p.end, &ce) || ce.Code != websocket.StatusPolicyViolation || ce.Reason != "sandbox_ended" {
		t.Fatalf("stream ended with %v, want close 1008 \"sandbox_ended\"", p.end)
	}
	t.Logf("through Redis: terminal stream closed %v after the delete", time.Since(start).Round(time.Millisecond))
}

// TestStreamTicketDiesWithItsToken: a terminal ticket minted with a token
// that is revoked before the ticket is used is refused at the upgrade.
// Found from the outside: the ticket opened a shell after the revocation,
// and the shell stayed open, the revocation's invalidation having come
// before there was a stream for it to end.
func TestStreamTicketDiesWithItsToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", false)
	e.addDevToken(t)
	id := e.createReady(t)
	var tk struct {
		Ticket string `json:"ticket"`
	}
	code, _, b := e.do("dev2", "POST", "/api/v1/sandboxes/"+id+"/exec/stream/tickets", nil)
	if code != http.StatusCreated || json.Unmarshal(b, &tk) != nil {
		t.Fatalf("mint ticket: %d %s", code, b)
	}
	e.revokeDev2(t)
	p, resp, err := e.dialPty(t, id, "command=echo+opened&ticket="+url.QueryEscape(tk.Ticket), nil)
	if err == nil {
		<-p.done
		t.Fatalf("ticket of a revoked token opened a terminal: output %q", p.out.String())
	}
	if resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("ticket of a revoked token: err %v, response %v; want 401", err, resp)
	}
}

// TestStreamEndsBeforeItsInvalidation: when the sandbox's end breaks a
// stream's session before any invalidation says so (through Redis the
// invalidation comes back asynchronously, while a delete destroys the
// sandbox at once), the stream still ends with the reason, found in the
// store, not with a dropped connection or a broken-session error. The
// row is ended and the sandbox destroyed behind the lifecycle's back, so
// no invalidation comes at all.
func TestStreamEndsBeforeItsInvalidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", false)
	markEnded := func(t *testing.T, id string) {
		ctx := context.Background()
		err := e.svc.Store.InTx(ctx, func(tx store.Tx) error {
			sb, err := tx.SandboxForUpdate(ctx, id)
			if err != nil {
				return err
			}
			sb.State = store.StateTerminated
			return tx.UpdateSandbox(ctx, sb)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	endBehindTheBack := func(t *testing.T, id string) {
		markEnded(t, id)
		if err := e.svc.Provider.Destroy(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("terminal", func(t *testing.T) {
		id := e.createReady(t)
		p, _, err := e.dialPty(t, id, "command="+url.QueryEscape("echo started; exec sleep 600"), http.Header{"Authorization": {"Bearer " + e.tokens["dev"]}})
		if err != nil {
			t.Fatal(err)
		}
		p.waitFor(0, "started")
		endBehindTheBack(t, id)
		select {
		case <-p.done:
		case <-time.After(time.Minute): // a hang detector: the session's end is what ends it
			t.Fatal("terminal stream still open a minute after its sandbox was destroyed")
		}
		var ce websocket.CloseError
		if !errors.As(p.end, &ce) || ce.Code != websocket.StatusPolicyViolation || ce.Reason != "sandbox_ended" {
			t.Fatalf("stream ended with %v, want close 1008 \"sandbox_ended\"", p.end)
		}
	})
	t.Run("exec stream", func(t *testing.T) {
		id := e.createReady(t)
		events, _ := e.startExecStream(t, id, `{"command":"echo started; exec sleep 600"}`, false)
		if ev := nextEvent(t, events); ev.name != "stdout" {
			t.Fatalf("first event %s %s, want stdout", ev.name, ev.data)
		}
		endBehindTheBack(t, id)
		last := lastEvent(t, events, time.Minute, "its sandbox was destroyed") // a hang detector, as above
		var p problemDoc
		if last.name != "error" || json.Unmarshal([]byte(last.data), &p) != nil || p.Code != "sandbox_ended" {
			t.Fatalf("last event %s %s, want error with problem code sandbox_ended", last.name, last.data)
		}
	})
	// The destroy kills the command, and its exit-signal may come before
	// the session breaks (seen under -race): a kill is the sandbox's end
	// too. Here the command is killed, as the destroy would, and nothing
	// else happens to its session.
	t.Run("exec stream, killed before its session breaks", func(t *testing.T) {
		id := e.createReady(t)
		events, _ := e.startExecStream(t, id, `{"command":"echo started; while [ ! -e stop ]; do sleep 0.05; done; kill -KILL $$"}`, false)
		if ev := nextEvent(t, events); ev.name != "stdout" {
			t.Fatalf("first event %s %s, want stdout", ev.name, ev.data)
		}
		sb, err := e.svc.Store.Sandbox(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		markEnded(t, id)
		if err := os.WriteFile(filepath.Join(sb.Workspace, "stop"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		last := lastEvent(t, events, time.Minute, "its command was killed")
		var p problemDoc
		if last.name != "error" || json.Unmarshal([]byte(last.data), &p) != nil || p.Code != "sandbox_ended" {
			t.Fatalf("last event %s %s, want error with problem code sandbox_ended", last.name, last.data)
		}
	})
}

// lastEvent reads an event stream to its end and returns its last event;
// a stream still open budget after what happened fails the test.
func lastEvent(t *testing.T, events <-chan execEvent, budget time.Duration, what string) execEvent {
	t.Helper()
	var last execEvent
	timeout := time.After(budget)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return last
			}
			last = ev
		case <-timeout:
			t.Fatalf("stream still open %v after %s", budget, what)
		}
	}
}

// tokenRevoked is the case of streamEndCases that revokes "dev2".
func tokenRevoked(t *testing.T) streamEndCase {
	t.Helper()
	for _, tc := range streamEndCases {
		if tc.code == "token_revoked" {
			return tc
		}
	}
	t.Fatal("no token_revoked case")
	return streamEndCase{}
}

// waitEvent reads events until one named name whose data holds want
// arrives within limit, and fails on an "error" event or the stream's end
// before it.
func waitEvent(t *testing.T, events <-chan execEvent, name, want string, limit time.Duration) execEvent {
	t.Helper()
	timeout := time.After(limit)
	for {
		select {
		case ev, ok := <-events:
			switch {
			case !ok:
				t.Fatalf("stream ended before a %s event holding %s", name, want)
			case ev.name == "error":
				t.Fatalf("error event %s before a %s event holding %s", ev.data, name, want)
			case ev.name == name && strings.Contains(ev.data, want):
				return ev
			}
		case <-timeout:
			t.Fatalf("no %s event holding %s within %v", name, want, limit)
		}
	}
}

// wantEndedWith fails unless the stream ends within tc's budget with an
// "error" event carrying tc's problem code.
func wantEndedWith(t *testing.T, events <-chan execEvent, tc streamEndCase) {
	t.Helper()
	last := lastEvent(t, events, tc.budget, tc.name)
	var p problemDoc
	if last.name != "error" || json.Unmarshal([]byte(last.data), &p) != nil || p.Code != tc.code {
		t.Fatalf("last event %s %s, want error with problem code %s", last.name, last.data, tc.code)
	}
}

// TestEventStreamEndsWithRevokedToken: a sandbox's event stream ends with
// a last "error" event carrying token_revoked once its token is revoked,
// while one opened by another token goes on, and goes on through the
// sandbox's suspend, which it reports rather than ends with.
func TestEventStreamEndsWithRevokedToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", false)
	e.addDevToken(t)
	tc := tokenRevoked(t)
	id := e.createReady(t)
	path := "/api/v1/sandboxes/" + id + "/events"
	revoked, _ := e.eventsAs(t, "dev2", "GET", path, nil, true)
	kept, _ := e.eventsAs(t, "dev", "GET", path, nil, true)
	for _, events := range []<-chan execEvent{revoked, kept} {
		waitEvent(t, events, "state", `"state":"ready"`, 30*time.Second)
	}
	start := time.Now()
	tc.end(t, e, id)
	wantEndedWith(t, revoked, tc)
	t.Logf("event stream ended %v after the revocation", time.Since(start).Round(time.Millisecond))

	e.suspend(t, id)
	waitEvent(t, kept, "state", `"state":"suspended"`, 10*time.Second)
	e.do("dev", "DELETE", "/api/v1/sandboxes/"+id, nil)
	if last := lastEvent(t, kept, 30*time.Second, "the sandbox was deleted"); last.name != "state" {
		t.Fatalf("the other token's stream ended with %s %s, want the final state's event", last.name, last.data)
	}
}

// TestServiceLogsFollowEndsWithAuthority: a followed service log ends,
// with a last "error" event naming why, when its token is revoked or its
// sandbox is deleted or suspended; when only the token went, a follow
// opened by another token goes on delivering lines.
func TestServiceLogsFollowEndsWithAuthority(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", false)
	e.addDevToken(t)
	for _, tc := range streamEndCases {
		t.Run(tc.name, func(t *testing.T) {
			id := e.createReady(t)
			if code, _, b := e.do("dev", "PUT", "/api/v1/sandboxes/"+id+"/services/ticker", jsonBody(map[string]any{
				"command": "while true; do echo tick; sleep 0.3; done",
			})); code != http.StatusOK {
				t.Fatalf("put ticker: %d %s", code, b)
			}
			e.waitService(t, id, "ticker", "running", func(s serviceDoc) bool { return s.State == "running" })
			path := "/api/v1/sandboxes/" + id + "/services/ticker/logs?follow=true&tail=1"
			events, _ := e.eventsAs(t, "dev2", "GET", path, nil, false)
			waitEvent(t, events, "line", `"text":"tick"`, 10*time.Second)
			var kept <-chan execEvent
			if tc.code == "token_revoked" {
				kept, _ = e.eventsAs(t, "dev", "GET", path, nil, false)
				waitEvent(t, kept, "line", `"text":"tick"`, 10*time.Second)
			}
			start := time.Now()
			tc.end(t, e, id)
			wantEndedWith(t, events, tc)
			t.Logf("%s: log follow ended %v after", tc.name, time.Since(start).Round(time.Millisecond))
			if kept != nil {
				ended := time.Now()
				for ev := waitEvent(t, kept, "line", `"text":"tick"`, 5*time.Second); !ev.at.After(ended); {
					ev = waitEvent(t, kept, "line", `"text":"tick"`, 5*time.Second)
				}
			}
			if tc.code != "sandbox_ended" {
				e.do("dev", "DELETE", "/api/v1/sandboxes/"+id, nil) // frees the account's slot
			}
		})
	}
}
