package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/store"
)

// workload is what a scenario runs its fault under: one sandbox per edge
// with an SSH PTY, an SSH exec stream and a preview WebSocket on that
// edge, an API exec loop and a terminal stream (control's PTY WebSocket)
// through the controls, and three connections whose authority the
// scenario revokes during the fault (a preview port unexposed; a sandbox
// deleted under an SSH exec stream and a terminal stream).
type workload struct {
	f          *fleet
	sandboxes  []string // one per edge, kept
	revokeSB   string   // deleted during the fault
	revokePort int      // unexposed during the fault
	set        *flowSet
	revokeWS   *flow
	revokeSSH  *flow
	revokePTY  *flow // control's terminal stream in the sandbox deleted
}

// apps are the sandboxes' web apps: the local provider's sandboxes share
// this machine's loopback, so this process serves them.
type apps struct {
	main, revoke int
	srv          []*http.Server
}

func startApps() (*apps, error) {
	a := &apps{}
	for _, p := range []*int{&a.main, &a.revoke} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		*p = ln.Addr().(*net.TCPAddr).Port
		srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(echoSocket)}
		go func() { _ = srv.Serve(ln) }() // ends at close
		a.srv = append(a.srv, srv)
	}
	return a, nil
}

func (a *apps) close() {
	for _, s := range a.srv {
		_ = s.Close()
	}
}

// echoSocket sends each message back until the client goes.
func echoSocket(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return
	}
	defer c.CloseNow()
	for {
		typ, b, err := c.Read(r.Context())
		if err != nil {
			return
		}
		if err := c.Write(r.Context(), typ, append([]byte("echo: "), b...)); err != nil {
			return
		}
	}
}

// setUp makes the workload's sandboxes with control A stopped, so that
// they run in control B (see fleet), and starts every flow.
func (f *fleet) setUp(ctx context.Context, ap *apps) (*workload, error) {
	a, b := f.controls[0], f.controls[1]
	if a.pid() != 0 {
		if err := a.signal(syscall.SIGSTOP); err != nil {
			return nil, err
		}
		defer func() { _ = a.signal(syscall.SIGCONT) }()
	}
	f.apiVia = b.api
	defer func() { f.apiVia = "" }()
	w := &workload{f: f, revokePort: ap.revoke}
	ids := make([]string, len(f.edges)+1)
	for i := range ids {
		id, err := f.createSandbox(ctx, b.api)
		if err != nil {
			return nil, err
		}
		ids[i] = id
	}
	for _, id := range ids {
		if _, err := f.waitStatus(ctx, id, "ready", 2*time.Minute); err != nil {
			return nil, err
		}
	}
	w.sandboxes, w.revokeSB = ids[:len(f.edges)], ids[len(f.edges)]
	fctx, cancel := context.WithCancel(ctx)
	w.set = &flowSet{cancel: cancel}
	for i, id := range w.sandboxes {
		key, err := f.sshKey(ctx, id)
		if err != nil {
			return nil, err
		}
		host, err := f.expose(ctx, id, ap.main)
		if err != nil {
			return nil, err
		}
		for _, kind := range []string{"ssh-pty", "ssh-exec", "preview-ws"} {
			w.set.flows = append(w.set.flows, &flow{name: fmt.Sprintf("%s@edge-%d", kind, i+1), kind: kind, sandbox: id, f: f, key: key, host: host,
				edge: i, homeEdge: i})
		}
	}
	w.set.flows = append(w.set.flows, &flow{name: "api-exec", kind: "api-exec", sandbox: w.sandboxes[0], f: f, edge: -1, homeEdge: -1},
		&flow{name: "api-pty", kind: "api-pty", sandbox: w.sandboxes[1], f: f, edge: -1, homeEdge: -1})
	// The connections to revoke ride on the last edge, which no
	// scenario kills.
	last := len(f.edges) - 1
	rhost, err := f.expose(ctx, w.sandboxes[0], ap.revoke)
	if err != nil {
		return nil, err
	}
	w.revokeWS = &flow{name: "revoked-port-ws", kind: "preview-ws", sandbox: w.sandboxes[0], f: f, host: rhost, edge: last, homeEdge: last}
	rkey, err := f.sshKey(ctx, w.revokeSB)
	if err != nil {
		return nil, err
	}
	w.revokeSSH = &flow{name: "deleted-sandbox-ssh", kind: "ssh-exec", sandbox: w.revokeSB, f: f, key: rkey, edge: last, homeEdge: last}
	w.revokePTY = &flow{name: "deleted-sandbox-pty", kind: "api-pty", sandbox: w.revokeSB, f: f, edge: -1, homeEdge: -1}
	w.set.flows = append(w.set.flows, w.revokeWS, w.revokeSSH, w.revokePTY)
	flows := w.set.flows
	w.set.flows = nil
	for _, fl := range flows {
		w.set.start(fctx, fl)
	}
	return w, nil
}

// apiBase is where API calls go: the balancer, or one replica while
// setUp pins them.
func (f *fleet) apiBase() string {
	if f.apiVia != "" {
		return f.apiVia
	}
	return f.apiLB.addr()
}

// revoke ends the authority of the two revocable connections, retrying
// each call until a control accepts it (Postgres may be down), and
// marks the flows from the moment it was accepted.
func (w *workload) revoke(ctx context.Context, limit time.Duration) error {
	f := w.f
	calls := []struct {
		fl           *flow
		method, path string
	}{
		{w.revokeWS, "DELETE", fmt.Sprintf("/api/v1/sandboxes/%s/ports/%d", w.sandboxes[0], w.revokePort)},
		{w.revokeSSH, "DELETE", "/api/v1/sandboxes/" + w.revokeSB},
	}
	var errs []error
	for _, c := range calls {
		deadline := time.Now().Add(limit)
		for {
			sent := time.Now()
			_, err := f.api(ctx, f.apiBase(), c.method, c.path, nil, nil)
			if err == nil {
				// From when the accepted call was sent: what it revokes
				// may be closed before its answer arrives.
				c.fl.revoke(sent)
				if c.fl == w.revokeSSH {
					w.revokePTY.revoke(sent)
				}
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				errs = append(errs, fmt.Errorf("revoke %s: %w", c.fl.name, err))
				break
			}
			sleepCtx(ctx, 200*time.Millisecond)
		}
	}
	return errors.Join(errs...)
}

// lost counts the kept sandboxes that are no longer ready and usable
// (an exec through the API must answer), and those suspended.
func (w *workload) lost(ctx context.Context) (lost, suspended int, notes []string) {
	for _, id := range w.sandboxes {
		sb, err := w.f.store.Sandbox(ctx, id)
		switch {
		case err != nil:
			lost++
			notes = append(notes, fmt.Sprintf("%s: %v", id, err))
			continue
		case sb.State == store.StateSuspended || sb.State == store.StateSuspending:
			suspended++
			notes = append(notes, fmt.Sprintf("%s %s", id, sb.State))
			continue
		case sb.State != store.StateReady:
			lost++
			notes = append(notes, fmt.Sprintf("%s %s", id, sb.State))
			continue
		}
		a := &apiExecConn{f: w.f, id: id}
		if err := a.roundTrip(ctx, "alive"); err != nil {
			lost++
			notes = append(notes, fmt.Sprintf("%s exec: %v", id, err))
		}
	}
	return lost, suspended, notes
}

// ledgerDiffs compares every sandbox's billing lines with what its story
// implies: a ready sandbox one open compute line; a deleted one its line
// closed as explicit_delete; one never ready none. The billing rule
// (lifecycle.CheckLedger) must hold for each as well.
func (f *fleet) ledgerDiffs(ctx context.Context) (n int, notes []string) {
	sbs, err := f.store.SandboxesInStates(ctx, store.StatePending, store.StateReady, store.StateSuspending, store.StateSuspended,
		store.StateRestoring, store.StateTerminating, store.StateTerminated, store.StateFailed)
	if err != nil {
		return 1, []string{"list sandboxes: " + err.Error()}
	}
	for _, sb := range sbs {
		ss, err := f.store.Sessions(ctx, sb.ID)
		if err != nil {
			n++
			notes = append(notes, err.Error())
			continue
		}
		if err := lifecycle.CheckLedger(sb, ss); err != nil {
			n++
			notes = append(notes, err.Error())
			continue
		}
		var parts []string
		for _, s := range ss {
			r := "open"
			if s.EndedAt != nil {
				r = s.EndReason
			}
			parts = append(parts, string(s.Kind)+":"+r)
		}
		got := strings.Join(parts, " ")
		want, known := map[store.State]string{
			store.StateReady:       "compute:open",
			store.StateTerminated:  "compute:" + lifecycle.ReasonExplicitDelete,
			store.StateTerminating: "compute:" + lifecycle.ReasonExplicitDelete,
			store.StatePending:     "",
		}[sb.State]
		if got == "" && sb.State != store.StateReady && sb.State != store.StateSuspended {
			continue // never ready, never billed (CheckLedger holds it to that)
		}
		if !known || got != want {
			n++
			notes = append(notes, fmt.Sprintf("%s %s: ledger %q, want %q", sb.ID, sb.State, got, want))
		}
	}
	return n, notes
}
