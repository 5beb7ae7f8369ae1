package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sbxedge/sbx/auth/token"
	"github.com/sbxedge/sbx/control/store"
)

// expiryBudget is how soon after its token expires a stream must end.
const expiryBudget = 5 * time.Second

// tokenLife is how long the tokens of these tests live: long enough to
// open a stream and see it flow on a loaded machine, short enough to
// wait out.
const tokenLife = 6 * time.Second

// addExpiringToken gives the dev account a token, name, that expires
// life from now, and returns when.
func (e *env) addExpiringToken(t *testing.T, name string, life time.Duration) time.Time {
	t.Helper()
	ctx := context.Background()
	acct, _, err := e.svc.Store.AccountByTokenHash(ctx, token.Hash(e.tokens["dev"]), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	secret, hash := token.New(token.PrefixAgent)
	now := time.Now().UTC()
	exp := now.Add(life)
	err = e.svc.Store.InTx(ctx, func(tx store.Tx) error {
		return tx.InsertToken(ctx, store.Token{ID: "tok-" + name, AccountID: acct.ID, Kind: store.TokenAgent,
			Name: name, Hash: hash, CreatedAt: now, ExpiresAt: &exp})
	})
	if err != nil {
		t.Fatal(err)
	}
	e.tokens[name] = secret
	return exp
}

// wantEndedAtExpiry fails unless the event stream ends within
// expiryBudget of exp, not before it, with a last "error" event carrying
// token_expired.
func wantEndedAtExpiry(t *testing.T, events <-chan execEvent, exp time.Time) {
	t.Helper()
	last := lastEvent(t, events, time.Until(exp)+expiryBudget, "its token expired")
	ended := time.Now()
	var p problemDoc
	if last.name != "error" || json.Unmarshal([]byte(last.data), &p) != nil || p.Code != "token_expired" {
		t.Fatalf("last event %s %s, want error with problem code token_expired", last.name, last.data)
	}
	if ended.Before(exp) {
		t.Fatalf("stream ended %v before its token expired", exp.Sub(ended))
	}
	t.Logf("ended %v after its token expired", ended.Sub(exp).Round(time.Millisecond))
}

// TestStreamsEndAtTokenExpiry: every kind of API stream (the terminal
// WebSocket, the exec stream, the event stream and a followed service
// log) opened with a token that expires mid-stream ends within
// expiryBudget of the expiry, saying token_expired. Found from the
// outside: a terminal still sent output 95 s after its token expired, and
// an event stream and a log follow stayed open for good.
func TestStreamsEndAtTokenExpiry(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", false)
	t.Run("terminal", func(t *testing.T) {
		id := e.createReady(t)
		exp := e.addExpiringToken(t, "pty", tokenLife)
		p, _, err := e.dialPty(t, id, "command="+url.QueryEscape("echo started; exec sleep 600"),
			http.Header{"Authorization": {"Bearer " + e.tokens["pty"]}})
		if err != nil {
			t.Fatal(err)
		}
		p.waitFor(0, "started")
		select {
		case <-p.done:
		case <-time.After(time.Until(exp) + expiryBudget):
			t.Fatalf("terminal stream still open %v after its token expired", expiryBudget)
		}
		if time.Now().Before(exp) {
			t.Fatalf("terminal stream ended before its token expired: %v", p.end)
		}
		var ce websocket.CloseError
		if !errors.As(p.end, &ce) || ce.Code != websocket.StatusPolicyViolation || ce.Reason != "token_expired" {
			t.Fatalf("stream ended with %v, want close 1008 \"token_expired\"", p.end)
		}
		e.do("dev", "DELETE", "/api/v1/sandboxes/"+id, nil)
	})
	t.Run("exec stream", func(t *testing.T) {
		id := e.createReady(t)
		exp := e.addExpiringToken(t, "exec", tokenLife)
		events, _ := e.startExecStreamAs(t, "exec", id, `{"command":"echo started; exec sleep 600"}`, false)
		if ev := nextEvent(t, events); ev.name != "stdout" {
			t.Fatalf("first event %s %s, want stdout", ev.name, ev.data)
		}
		wantEndedAtExpiry(t, events, exp)
		e.do("dev", "DELETE", "/api/v1/sandboxes/"+id, nil)
	})
	t.Run("events", func(t *testing.T) {
		id := e.createReady(t)
		exp := e.addExpiringToken(t, "events", tokenLife)
		events, _ := e.eventsAs(t, "events", "GET", "/api/v1/sandboxes/"+id+"/events", nil, true)
		waitEvent(t, events, "state", `"state":"ready"`, 30*time.Second)
		wantEndedAtExpiry(t, events, exp)
		e.do("dev", "DELETE", "/api/v1/sandboxes/"+id, nil)
	})
	t.Run("service log follow", func(t *testing.T) {
		id := e.createReady(t)
		if code, _, b := e.do("dev", "PUT", "/api/v1/sandboxes/"+id+"/services/ticker", jsonBody(map[string]any{
			"command": "while true; do echo tick; sleep 0.3; done",
		})); code != http.StatusOK {
			t.Fatalf("put ticker: %d %s", code, b)
		}
		e.waitService(t, id, "ticker", "running", func(s serviceDoc) bool { return s.State == "running" })
		exp := e.addExpiringToken(t, "logs", tokenLife)
		events, _ := e.eventsAs(t, "logs", "GET", "/api/v1/sandboxes/"+id+"/services/ticker/logs?follow=true&tail=1", nil, false)
		waitEvent(t, events, "line", `"text":"tick"`, 10*time.Second)
		wantEndedAtExpiry(t, events, exp)
		e.do("dev", "DELETE", "/api/v1/sandboxes/"+id, nil)
	})
}

// TestStreamTicketNeverOutlivesItsToken: a ticket minted shortly before
// its token expires says it expires with the token, and cannot open a
// terminal once the token has expired. Found from the outside: a ticket
// minted 4 s before expiry opened a terminal 4 s after it.
func TestStreamTicketNeverOutlivesItsToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", false)
	id := e.createReady(t)
	exp := e.addExpiringToken(t, "short", 3*time.Second)
	var tk struct {
		Ticket    string    `json:"ticket"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	code, _, b := e.do("short", "POST", "/api/v1/sandboxes/"+id+"/exec/stream/tickets", nil)
	if code != http.StatusCreated || json.Unmarshal(b, &tk) != nil {
		t.Fatalf("mint ticket: %d %s", code, b)
	}
	if tk.ExpiresAt.After(exp) {
		t.Errorf("ticket expires at %v, after its token (%v)", tk.ExpiresAt, exp)
	}
	// Wait on the clock the expiry is about, then a little past it.
	time.Sleep(time.Until(exp) + 500*time.Millisecond)
	p, resp, err := e.dialPty(t, id, "command=echo+opened&ticket="+url.QueryEscape(tk.Ticket), nil)
	if err == nil {
		<-p.done
		t.Fatalf("ticket of an expired token opened a terminal: output %q", p.out.String())
	}
	if resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("ticket of an expired token: err %v, response %v; want 401", err, resp)
	}
}
