package preview

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/initproto"
)

// A wake, as the preview sees it, is done when the port answers, not when
// the sandbox is ready: after a restore the sandbox's init starts its
// services, and a dev server takes a moment to listen. One wake runs per
// preview host at a time, in a goroutine the Proxy owns (bounded by
// WakeTimeout, ended by Close), whoever asked first: browsers watch it
// through the waking page, API clients are held until it ends.

// wakeStatusPath is the waking page's status endpoint on the preview
// host. It sits behind the same authorisation as the app, so only the
// preview's own pages (or a token holder) can read it, and answers no
// CORS headers, so another origin's script cannot.
const wakeStatusPath = "/__sbx_preview/wake-status"

// ErrSandboxEnded is what a Waker wraps for a sandbox that ended or
// failed: it will not wake.
var ErrSandboxEnded = edgeapi.ErrWakeSandboxEnded

// errPortClosed is what dialPort wraps when every loopback address
// refused: nothing listens on the port.
var errPortClosed = errors.New("nothing is listening on the port")

// Steps of a wake, in order.
const (
	stepStarting  = "starting_sandbox" // pending: first provisioning
	stepRestoring = "restoring"        // suspended or restoring
	stepService   = "starting_service" // the service declaring the port starts
	stepPort      = "waiting_for_port" // the port does not answer yet
	stepReady     = "ready"
	stepFailed    = "failed"
)

// A waking preview tries its port at once when its sandbox is ready (the
// event the wake waited for), then every portPollFast for portFastFor,
// when an app that starts with its sandbox comes up, then twice as long
// after each miss up to portPoll. A refused try costs a connection and a
// handshake with the sandbox's forwarder (or a channel open on the
// pooled SSH connection): 250 of them in the fast window at most. A fixed
// 150 ms between tries was half of a wake's cost, and doubling from 2 ms
// still left tens of ms between the app listening and the next try
// (loadtest ready); a port that takes its time is still tried only every
// portPoll.
const (
	portPollFast = 4 * time.Millisecond
	portFastFor  = time.Second
	portPoll     = 150 * time.Millisecond
)

// wakeState is one wake of one preview host.
type wakeState struct {
	label     string
	sandboxID string
	port      int
	portLabel string
	public    bool
	started   time.Time
	done      chan struct{} // closed when the wake ended, either way

	mu      sync.Mutex // guards the fields below
	step    string
	service string
	steps   []stepMark
	route   Route  // the ready route, once done without err
	err     error  // why it failed
	problem string // the problem code of err
}

type stepMark struct {
	Step    string `json:"step"`
	Service string `json:"service,omitempty"`
	AtMS    int64  `json:"at_ms"` // since the wake began
}

func (w *wakeState) set(now time.Time, step, service string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.step == step && w.service == service {
		return
	}
	w.step, w.service = step, service
	w.steps = append(w.steps, stepMark{Step: step, Service: service, AtMS: now.Sub(w.started).Milliseconds()})
}

func (w *wakeState) result() (Route, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.route, w.err
}

// wakeStatus is the status endpoint's answer.
type wakeStatus struct {
	Step      string     `json:"step"`
	Service   string     `json:"service,omitempty"`
	Port      int        `json:"port"`
	SandboxID string     `json:"sandbox_id,omitempty"` // private previews only
	ElapsedMS int64      `json:"elapsed_ms"`
	Ready     bool       `json:"ready"`
	Steps     []stepMark `json:"steps"`
	// Code and Detail say why a failed wake failed (a problem code).
	Code   string `json:"code,omitempty"`
	Detail string `json:"detail,omitempty"`
	// Next is what to do, its commands between backticks; Logs the
	// failing service's last lines (private previews only).
	Next string   `json:"next,omitempty"`
	Logs []string `json:"logs,omitempty"`
}

func (w *wakeState) status(now time.Time) wakeStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := wakeStatus{
		Step: w.step, Service: w.service, Port: w.port, Ready: w.step == stepReady,
		ElapsedMS: now.Sub(w.started).Milliseconds(), Steps: append([]stepMark(nil), w.steps...),
	}
	if !w.public {
		st.SandboxID = w.sandboxID
	}
	if w.err != nil {
		pg := wakeProblem(w.err, w.port)
		st.Code, st.Detail = w.problem, pg.Detail
		s := pageSubject{sandboxID: st.SandboxID, port: w.port, service: crashService(w.err)}
		st.Next = pageNext(pg.Code, s)
		if !w.public {
			st.Logs = pg.Logs
		}
	}
	return st
}

// wakes holds the wake of each preview host; finished ones are kept until
// the next wake of that host, so the status endpoint can still say how
// it went. mu guards m.
type wakes struct {
	mu sync.Mutex
	m  map[string]*wakeState
	wg sync.WaitGroup
	// running counts the wakes in progress, so that a request finds
	// none without taking mu.
	running atomic.Int64
}

// startWake returns the wake of label in progress, or starts one from rt.
func (p *Proxy) startWake(label string, rt Route) *wakeState {
	p.wakes.mu.Lock()
	defer p.wakes.mu.Unlock()
	if w := p.wakes.m[label]; w != nil {
		select {
		case <-w.done:
		default:
			return w
		}
	}
	if len(p.wakes.m) >= 10_000 {
		for l, w := range p.wakes.m {
			select {
			case <-w.done:
				delete(p.wakes.m, l)
			default:
			}
		}
	}
	w := &wakeState{label: label, sandboxID: rt.SandboxID, port: rt.Port, portLabel: rt.PortLabel, public: rt.Public,
		started: p.cfg.Now(), done: make(chan struct{})}
	w.set(w.started, firstStep(rt), "")
	p.wakes.m[label] = w
	p.wakes.wg.Add(1)
	p.wakes.running.Add(1)
	go func() {
		defer p.wakes.wg.Done()
		defer p.wakes.running.Add(-1)
		defer close(w.done)
		p.runWake(w, rt)
	}()
	return w
}

// firstStep is what a wake of rt waits for first, from control's
// admission: a starting sandbox is being provisioned, any other one that
// is not ready (an older control sends no admission) is restored.
func firstStep(rt Route) string {
	switch {
	case rt.Ready:
		return stepPort
	case rt.Admission == edgeapi.AdmissionStarting:
		return stepStarting
	}
	return stepRestoring
}

// wakeRunning reports whether a wake of label is in progress.
func (p *Proxy) wakeRunning(label string) bool {
	if p.wakes.running.Load() == 0 {
		return false
	}
	w := p.wakeOf(label)
	if w == nil {
		return false
	}
	select {
	case <-w.done:
		return false
	default:
		return true
	}
}

// wakeOf returns label's current or last wake, nil if none.
func (p *Proxy) wakeOf(label string) *wakeState {
	p.wakes.mu.Lock()
	defer p.wakes.mu.Unlock()
	return p.wakes.m[label]
}

// runWake makes the sandbox ready (through the Waker) and then waits for
// its port to answer, recording each step.
func (p *Proxy) runWake(w *wakeState, rt Route) {
	ctx, cancel := context.WithTimeout(p.wakeCtx, p.cfg.WakeTimeout)
	defer cancel()
	fail := func(err error) {
		w.mu.Lock()
		w.err, w.problem = err, wakeProblem(err, w.port).Code
		w.mu.Unlock()
		w.set(p.cfg.Now(), stepFailed, "")
		p.log.InfoContext(ctx, "preview wake failed", "sandbox_id", w.sandboxID, "port", w.port, "err", err)
	}
	if !rt.Ready {
		if err := p.waker.Wake(ctx, rt.SandboxID); err != nil {
			fail(fmt.Errorf("wake sandbox %s: %w", rt.SandboxID, err))
			return
		}
		p.routes.Invalidate(w.label)
		nrt, err := p.routes.get(ctx, w.label)
		if err != nil {
			fail(err)
			return
		}
		if !nrt.Ready || nrt.SandboxID != rt.SandboxID {
			fail(fmt.Errorf("sandbox %s still not ready", rt.SandboxID))
			return
		}
		rt = nrt // the loop's first turn names the next step
	}
	var lastAsk time.Time
	var lastErr error
	// The init is asked beside the tries, not between them: an ask is
	// an SSH connection to the sandbox just restored (a handshake, and
	// with sshd a process) plus a call, and an app that starts
	// listening meanwhile would otherwise wait for it to end before
	// the next try (loadtest ready). One ask at a time; its goroutine
	// ends with ctx, and Close waits for it as for the wake.
	asks := make(chan portAsk, 1)
	asking := false
	wait, portSince := portPollFast, p.cfg.Now()
	for {
		tried := p.cfg.Now()
		conn, err := p.dialPort(ctx, rt, rt.upstream)
		if err == nil {
			// The connection that found the port open is the one the
			// held requests need: it goes to the idle pool they take
			// from, rather than closed and a new one dialled (a second
			// connect and handshake with the forwarder on every wake).
			// It is an upstream connection like any, and counts as one.
			p.metrics.dial.Observe(p.cfg.Now().Sub(tried).Seconds())
			p.pool.adopt(conn, cmp.Or(rt.upstream, upstreamKey(rt)))
			w.mu.Lock()
			w.route = rt
			w.mu.Unlock()
			w.set(p.cfg.Now(), stepReady, "")
			st := w.status(p.cfg.Now())
			p.log.InfoContext(ctx, "preview woke", "sandbox_id", w.sandboxID, "port", w.port, "took_ms", st.ElapsedMS, "steps", st.Steps)
			return
		}
		lastErr = err
		// Anything but a refusal (an SSH connection to the sandbox's
		// previous incarnation, not yet noticed dead) is retried until
		// the wake's deadline; the pool redials.
		if now := p.cfg.Now(); errors.Is(err, errPortClosed) && !asking && now.Sub(lastAsk) >= 500*time.Millisecond {
			lastAsk, asking = now, true
			p.wakes.wg.Go(func() {
				svc, err := p.portService(ctx, rt)
				asks <- portAsk{svc: svc, err: err}
			})
		}
		t := time.NewTimer(wait)
		if p.cfg.Now().Sub(portSince) >= portFastFor {
			wait = min(2*wait, portPoll)
		}
		select {
		case <-ctx.Done():
			t.Stop()
			fail(fmt.Errorf("port %d of sandbox %s did not answer: %w (last: %w)", rt.Port, rt.SandboxID, context.Cause(ctx), lastErr))
			return
		case a := <-asks:
			t.Stop()
			asking = false
			if err := p.portAsked(ctx, w, rt, a); err != nil {
				fail(err)
				return
			}
			// Try the port again at once: the ask took a while.
		case <-t.C:
		}
	}
}

// portAsk is what the init said about the port a wake waits for.
type portAsk struct {
	svc initproto.Status
	err error
}

// portAsked records what the init said about the port a wake waits for,
// and returns the error to fail the wake with when the port will not come
// up by itself.
func (p *Proxy) portAsked(ctx context.Context, w *wakeState, rt Route, a portAsk) error {
	now := p.cfg.Now()
	svc, name, state := a.svc, a.svc.Name, a.svc.State
	switch {
	case a.err != nil:
		// Not knowing is not "nothing declares it": keep the step and
		// wait for the port, and ask again later.
		p.log.DebugContext(ctx, "ask sandbox init", "sandbox_id", rt.SandboxID, "port", rt.Port, "err", a.err)
	case name == "":
		// Nothing will come up by itself: say so now rather than hold
		// the caller for the whole wake timeout.
		return fmt.Errorf("port %d of sandbox %s: %w, and no service declares it", rt.Port, rt.SandboxID, errPortClosed)
	case svc.QuickExits >= crashLoopExits && svc.ExitCode != nil:
		// It will not come up by itself either: say why, with its last
		// words, rather than hold the caller.
		return &crashLoopError{service: name, code: *svc.ExitCode, logs: p.serviceTail(ctx, rt, name)}
	case state == initproto.StateStarting || state == initproto.StateRestarting:
		w.set(now, stepService, name)
	default:
		w.set(now, stepPort, name)
	}
	return nil
}

// portService asks the sandbox's init which service declares rt's port
// and in what state it is: name "" when none does, or the sandbox has no
// init (no subsystem, or one that closes without an answer: the relay of
// a sandbox whose init is not running). An error means the init could not
// be asked (no connection, no answer in time), which says nothing about
// the port.
func (p *Proxy) portService(ctx context.Context, rt Route) (initproto.Status, error) {
	c, err := p.cfg.Pods.Client(ctx, rt.Target)
	if err != nil {
		return initproto.Status{}, err
	}
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	list, err := (initproto.Client{SSH: c}).List(ictx)
	switch {
	case errors.Is(err, initproto.ErrNoInit), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return initproto.Status{}, nil
	case err != nil:
		return initproto.Status{}, err
	}
	for _, s := range list {
		if s.Port == rt.Port {
			return s, nil
		}
	}
	return initproto.Status{}, nil
}

// crashLoopExits is how many quick exits in a row make a service one
// that keeps crashing: its preview stops waiting for it.
const crashLoopExits = 3

// crashLogLines is how many of its last log lines a crash-looping
// service's page and problem show.
const crashLogLines = 12

// crashLoopError is a wake given up on because the service declaring the
// port keeps exiting.
type crashLoopError struct {
	service string
	code    int
	logs    []string
}

func (e *crashLoopError) Error() string {
	return fmt.Sprintf("service `%s` keeps exiting (code %d)", e.service, e.code)
}

// serviceTail is the last lines of a service's log, none when the init
// cannot be asked: the page says what it knows without them.
func (p *Proxy) serviceTail(ctx context.Context, rt Route, name string) []string {
	c, err := p.cfg.Pods.Client(ctx, rt.Target)
	if err != nil {
		return nil
	}
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	lines, err := (initproto.Client{SSH: c}).Logs(ictx, name, crashLogLines)
	if err != nil {
		p.log.DebugContext(ctx, "read service log", "sandbox_id", rt.SandboxID, "service", name, "err", err)
		return nil
	}
	out := make([]string, 0, len(lines))
	for _, l := range lines {
		out = append(out, l.Text)
	}
	return out
}

// isRefused reports whether a direct-tcpip open failed because the
// sandbox refused it (nothing listening), not because the connection
// broke.
func isRefused(err error) bool {
	var oce *ssh.OpenChannelError
	return errors.As(err, &oce)
}

// wakeProblem is the problem a failed wake is answered with.
func wakeProblem(err error, port int) problemPage {
	var crash *crashLoopError
	switch {
	case errors.As(err, &crash):
		return crashLoopPage(crash)
	case errors.Is(err, ErrSandboxEnded):
		return pageEnded
	case errors.Is(err, errPortClosed) && errors.Is(err, context.DeadlineExceeded):
		return pageWakeTimeout
	case errors.Is(err, errPortClosed):
		return portClosedPage(port)
	}
	return pageWakeFailed
}

// serveWakeStatus answers the waking page's poll: the current (or last)
// wake of this host, starting one if none runs and the preview is not
// up, so a page reloaded after a failure tries again.
func (p *Proxy) serveWakeStatus(w http.ResponseWriter, r *http.Request, label string, rt Route) {
	// Someone is watching the page: the sandbox is in use, and must not
	// look idle (and be suspended again) the moment it is up.
	p.activity.Mark(rt.SandboxID)
	ws := p.wakeOf(label)
	if ws == nil || (ws.finishedWithError() && r.URL.Query().Get("retry") == "1") {
		ws = p.startWake(label, rt)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	_ = json.NewEncoder(w).Encode(ws.status(p.cfg.Now()))
}

func (w *wakeState) finishedWithError() bool {
	select {
	case <-w.done:
	default:
		return false
	}
	_, err := w.result()
	return err != nil
}

// awaitWake holds a request for a preview that is not up: an API client
// until the wake ends (WakeTimeout), a browser navigation for a moment,
// after which it gets the waking page. It returns the route to proxy to,
// or false when it answered the request itself.
func (p *Proxy) awaitWake(w http.ResponseWriter, r *http.Request, label string, rt Route) (Route, bool) {
	ws := p.startWake(label, rt)
	var patience <-chan time.Time
	if isNavigation(r) {
		t := time.NewTimer(navigationWakeWait)
		defer t.Stop()
		patience = t.C
	}
	select {
	case <-ws.done:
	case <-patience:
		p.writeWakingPage(w, r, ws)
		return Route{}, false
	case <-r.Context().Done():
		w.WriteHeader(499)
		return Route{}, false
	}
	nrt, err := ws.result()
	if err != nil {
		pg := wakeProblem(err, rt.Port)
		p.log.InfoContext(r.Context(), "preview not up", "sandbox_id", rt.SandboxID, "port", rt.Port, "code", pg.Code, "err", err)
		writeRouteProblem(w, r, pg, rt, crashService(err))
		return Route{}, false
	}
	return nrt, true
}
