package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbxedge/sbx/control/apiclient"
)

// The labels on every sandbox a scale test creates: scaleLabel marks all
// of them (what --cleanup lists), scaleRunLabel the run's own.
const (
	scaleLabel    = "sbx-scaletest"
	scaleRunLabel = "sbx-scaletest-run"
)

type scaleOptions struct {
	sandboxes, sshSessions, previews, websockets, terminals int
	duration, ramp, interval                                time.Duration
	profile, plot, metrics                                  string
	cleanup                                                 bool
}

func newScaleTestCmd(a *app) *cobra.Command {
	var o scaleOptions
	c := &cobra.Command{
		Use:   "scaletest",
		Short: "Create sandboxes, hold SSH sessions, previews and WebSockets on them, and measure",
		Long: `Create --sandboxes sandboxes on the API sbx points at, hold --ssh-sessions SSH
sessions through the broker (the credential sbx ssh uses; each runs cat and
gets a keystroke every --interval), --previews HTTP clients on a tiny python3
HTTP server in each sandbox (exposed as a private preview; a small request
every --interval on a keep-alive connection), --websockets WebSockets to the
same server through the preview proxy (it echoes a message sent every
--interval), and --terminals terminal streams (the API's WebSocket, running
cat on a raw terminal; a keystroke every --interval). Clients are spread
over --ramp, then held for --duration.

It prints p50/p95/p99 of each latency measured at the client (connect, first
byte, keystroke echo, request), the errors by kind and, with --metrics, the
server's memory, goroutines, connections and CPU before and with the load
held. --plot draws p50 and p99 per second as an SVG.

Every sandbox carries the labels sbx-scaletest=true and sbx-scaletest-run=ID
and a deadline a few minutes past the run: they are destroyed when the run
ends, on Ctrl-C too, and --cleanup destroys what a crashed run left.`,
		Example: `  sbx scaletest --sandboxes 4 --ssh-sessions 8 --previews 8 --websockets 4 --duration 30s
  sbx scaletest --sandboxes 2 --duration 10s --metrics http://127.0.0.1:9090/metrics --plot scale.svg -o json
  sbx scaletest --cleanup`,
		Args: args(nil),
		RunE: a.withAPI(func(c *cobra.Command, cl *apiClient, _ []string) error {
			if o.cleanup {
				n, err := a.scaleCleanup(c.Context(), cl, scaleLabel+"=true", nil)
				fmt.Fprintf(a.errw, "sbx: destroyed %d scale-test sandboxes\n", n)
				return err
			}
			if err := o.check(c); err != nil {
				return err
			}
			return a.runScaleTest(c.Context(), cl, o)
		}),
	}
	f := c.Flags()
	f.IntVar(&o.sandboxes, "sandboxes", 1, "sandboxes to create")
	f.IntVar(&o.sshSessions, "ssh-sessions", 1, "SSH sessions to hold, spread over the sandboxes")
	f.IntVar(&o.previews, "previews", 1, "preview HTTP clients, spread over the sandboxes")
	f.IntVar(&o.websockets, "websockets", 1, "preview WebSockets to hold (an echo in the sandbox), spread over the sandboxes")
	f.IntVar(&o.terminals, "terminals", 0, "terminal streams (the API's WebSocket) to hold, spread over the sandboxes")
	f.DurationVar(&o.duration, "duration", 30*time.Second, "how long the load is held once every client started")
	f.DurationVar(&o.ramp, "ramp", 0, "time over which the clients start, evenly")
	f.DurationVar(&o.interval, "interval", 100*time.Millisecond, "time between one client's keystrokes or requests")
	f.StringVar(&o.profile, "profile", "", "sandbox profile (default: the server's)")
	f.StringVar(&o.metrics, "metrics", "", "the server's Prometheus /metrics URL, read before and with the load held")
	f.StringVar(&o.plot, "plot", "", "write p50/p99 per second over the run to this SVG file")
	f.BoolVar(&o.cleanup, "cleanup", false, "destroy every sandbox a scale test left (labelled sbx-scaletest=true), then exit")
	_ = c.RegisterFlagCompletionFunc("profile", a.completeProfiles)
	return c
}

func (o scaleOptions) check(c *cobra.Command) error {
	switch {
	case o.sandboxes < 1:
		return usageErrorf(c, "--sandboxes %d: want at least 1", o.sandboxes)
	case o.sshSessions < 0 || o.previews < 0 || o.websockets < 0 || o.terminals < 0:
		return usageErrorf(c, "--ssh-sessions, --previews, --websockets and --terminals: want 0 or more")
	case o.duration <= 0 || o.ramp < 0:
		return usageErrorf(c, "--duration: want more than 0; --ramp: 0 or more")
	case o.interval < time.Millisecond:
		return usageErrorf(c, "--interval %s: want at least 1ms", o.interval)
	}
	if o.metrics != "" {
		if u, err := url.Parse(o.metrics); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return usageErrorf(c, "--metrics %q: want an http:// or https:// URL", o.metrics)
		}
	}
	return nil
}

// scaleReport is what -o json prints.
type scaleReport struct {
	RunID       string                   `json:"run_id"`
	Sandboxes   int                      `json:"sandboxes"`
	SSHSessions int                      `json:"ssh_sessions"`
	Previews    int                      `json:"previews"`
	WebSockets  int                      `json:"websockets"`
	Terminals   int                      `json:"terminals"`
	Interval    float64                  `json:"interval_seconds"`
	Ramp        float64                  `json:"ramp_seconds"`
	Duration    float64                  `json:"duration_seconds"`
	Latencies   []latencyRow             `json:"latencies"`
	Errors      []errorRow               `json:"errors"`
	Server      []serverRow              `json:"server,omitempty"`
	PerSecond   map[string][]secondPoint `json:"per_second"`
}

// runScaleTest runs one scale test and destroys its sandboxes however it
// ends.
func (a *app) runScaleTest(ctx context.Context, cl *apiClient, o scaleOptions) (err error) {
	tok, err := a.token()
	if err != nil {
		return err
	}
	runID := strings.ToLower(rand.Text()[:12])
	rec := newScaleRecorder(time.Now())
	l := &scaleLoad{a: a, cl: cl, token: tok, rec: rec, interval: o.interval, pinned: map[string]bool{}}
	var made sync.Map // IDs created, destroyed even if the label list fails
	defer func() {
		// The run's context may be cancelled (Ctrl-C): the cleanup has
		// its own, bounded.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		var ids []string
		made.Range(func(k, _ any) bool { ids = append(ids, k.(string)); return true })
		n, cerr := a.scaleCleanup(cctx, cl, scaleRunLabel+"="+runID, ids)
		fmt.Fprintf(a.errw, "scaletest %s: destroyed %d sandboxes\n", runID, n)
		if ctx.Err() != nil && cerr == nil {
			err = &interruptedError{msg: fmt.Sprintf("interrupted; scaletest %s destroyed its %d sandboxes", runID, n)}
			return
		}
		err = errors.Join(err, cerr)
	}()

	var start map[string]float64
	if o.metrics != "" {
		if start, err = scrapeMetrics(ctx, o.metrics); err != nil {
			return err
		}
	}
	fmt.Fprintf(a.errw, "scaletest %s: creating %d sandboxes\n", runID, o.sandboxes)
	ids, err := a.scaleCreate(ctx, cl, o, runID, rec, &made)
	if err != nil {
		return err
	}
	var urls []string
	if o.previews > 0 || o.websockets > 0 {
		gc, err := a.generated(wakeHold)
		if err != nil {
			return err
		}
		urls = make([]string, len(ids))
		if err := forEachLimited(ctx, len(ids), 4, func(ctx context.Context, i int) error {
			var err error
			urls[i], err = l.previewURL(ctx, gc, ids[i])
			return err
		}); err != nil {
			return err
		}
	}
	total := o.sshSessions + o.previews + o.websockets + o.terminals
	fmt.Fprintf(a.errw, "scaletest %s: starting %d clients over %s, then holding for %s\n", runID, total, o.ramp, o.duration)
	loadStart := time.Now()
	rctx, cancel := context.WithDeadline(ctx, loadStart.Add(o.ramp+o.duration))
	defer cancel()
	var wg sync.WaitGroup
	k := 0
	launch := func(n int, run func(ctx context.Context, i int)) {
		for i := range n {
			delay := time.Duration(0)
			if total > 1 {
				delay = o.ramp * time.Duration(k) / time.Duration(total)
			}
			k++
			wg.Add(1)
			go func() {
				defer wg.Done()
				if sleepCtx(rctx, delay) {
					run(rctx, i)
				}
			}()
		}
	}
	launch(o.sshSessions, func(ctx context.Context, i int) { l.sshSession(ctx, ids[i%len(ids)]) })
	launch(o.previews, func(ctx context.Context, i int) { l.previewClient(ctx, urls[i%len(urls)]) })
	launch(o.websockets, func(ctx context.Context, i int) { l.previewWebSocket(ctx, urls[i%len(urls)]) })
	launch(o.terminals, func(ctx context.Context, i int) { l.terminal(ctx, ids[i%len(ids)]) })

	// The server is read with the load held, just before the run ends.
	var loaded map[string]float64
	var merr error
	if o.metrics != "" && sleepCtx(rctx, max(o.ramp+o.duration-time.Second, 0)) {
		loaded, merr = scrapeMetrics(rctx, o.metrics)
	}
	<-rctx.Done()
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if merr != nil {
		fmt.Fprintf(a.errw, "scaletest %s: %v\n", runID, merr)
	}
	fmt.Fprintf(a.errw, "scaletest %s: load done; destroying the sandboxes\n", runID)

	rep := scaleReport{RunID: runID, Sandboxes: o.sandboxes, SSHSessions: o.sshSessions, Previews: o.previews, WebSockets: o.websockets, Terminals: o.terminals,
		Interval: o.interval.Seconds(), Ramp: o.ramp.Seconds(), Duration: o.duration.Seconds(),
		Latencies: rec.rows(), Errors: rec.errorRows(), PerSecond: map[string][]secondPoint{}}
	if start != nil && loaded != nil {
		rep.Server = serverRows(start, loaded)
	}
	for _, k := range plottedKinds {
		if s := rec.series(k); len(s) > 0 {
			rep.PerSecond[k] = s
		}
	}
	if o.plot != "" {
		title := fmt.Sprintf("sbx scaletest: %d sandboxes, %d SSH, %d preview, %d WebSocket, %d terminal clients", o.sandboxes, o.sshSessions, o.previews, o.websockets, o.terminals)
		if err := writeFileWith(o.plot, func(w io.Writer) error {
			return writePlot(w, rec, title, int((time.Since(rec.start)+time.Second-1)/time.Second))
		}); err != nil {
			return err
		}
	}
	if err := a.printScaleReport(rep); err != nil {
		return err
	}
	if len(rep.Errors) > 0 {
		return fmt.Errorf("scaletest %s: %d kinds of error (listed above)", runID, len(rep.Errors))
	}
	return nil
}

// scaleCreate creates the run's sandboxes, a few at a time, and waits
// for each to be ready.
func (a *app) scaleCreate(ctx context.Context, cl *apiClient, o scaleOptions, runID string, rec *scaleRecorder, made *sync.Map) ([]string, error) {
	minutes := int((o.ramp+o.duration)/time.Minute) + 10
	ids := make([]string, o.sandboxes)
	err := forEachLimited(ctx, o.sandboxes, 8, func(ctx context.Context, i int) error {
		body := apiclient.CreateSandbox{Labels: &map[string]string{scaleLabel: "true", scaleRunLabel: runID}, DeadlineMinutes: &minutes}
		if o.profile != "" {
			body.Profile = &o.profile
		}
		key := "sbx-scaletest-" + runID + "-" + fmt.Sprint(i)
		start := time.Now()
		var sb sandbox
		if err := decodeRaw(&sb)(apiclient.Raw(cl.gen.CreateSandboxWithResponse(ctx, &apiclient.CreateSandboxParams{IdempotencyKey: &key}, body))); err != nil {
			rec.fail(kindReady, err)
			return fmt.Errorf("create sandbox: %w", err)
		}
		made.Store(sb.ID, true)
		state := ""
		wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		err := followEvents(wctx, cl, sb.ID, 0, func(ev event) bool {
			if ev.State != nil {
				state = *ev.State
			}
			return state != "" && state != "pending"
		})
		cancel()
		if err == nil && state != "ready" {
			err = fmt.Errorf("sandbox %s is %s, not ready; `sbx events %s` says why", sb.ID, state, sb.ID)
		}
		if err != nil {
			rec.fail(kindReady, err)
			return err
		}
		rec.add(kindReady, time.Since(start))
		ids[i] = sb.ID
		return nil
	})
	return ids, err
}

// forEachLimited runs f for 0..n-1, at most limit at once, and returns
// the first error (the others are cancelled by it).
func forEachLimited(ctx context.Context, n, limit int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := f(ctx, i); err != nil {
				cancel(err)
			}
		}()
	}
	wg.Wait()
	return context.Cause(ctx)
}

// scaleCleanup destroys every live sandbox labelled label (key=value),
// and those of ids, and waits (bounded) until they have ended.
func (a *app) scaleCleanup(ctx context.Context, cl *apiClient, label string, ids []string) (int, error) {
	list, lerr := cl.sandboxPages(ctx, apiclient.ListSandboxesParams{Label: &[]string{label}})
	live := map[string]bool{}
	for _, id := range ids {
		live[id] = true
	}
	for _, sb := range list {
		live[sb.ID] = !scaleEnded(sb.Status)
	}
	var errs []error
	n := 0
	for id, alive := range live {
		if !alive {
			continue
		}
		_, err := apiclient.Result(cl.gen.DeleteSandboxWithResponse(ctx, id, nil))
		var pe *apiError
		if errors.As(err, &pe) && pe.Status == 404 {
			continue // it ended already
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("destroy %s: %w", id, err))
			continue
		}
		n++
	}
	if lerr != nil {
		return n, errors.Join(append(errs, fmt.Errorf("list the sandboxes labelled %s: %w", label, lerr))...)
	}
	// Destroying is asynchronous: wait until none of them is left live,
	// so that the run's end means what it says.
	for {
		list, err := cl.sandboxPages(ctx, apiclient.ListSandboxesParams{Label: &[]string{label}})
		if err != nil {
			return n, errors.Join(append(errs, err)...)
		}
		left := 0
		for _, sb := range list {
			if !scaleEnded(sb.Status) {
				left++
			}
		}
		if left == 0 {
			return n, errors.Join(errs...)
		}
		if !sleepCtx(ctx, 250*time.Millisecond) {
			return n, errors.Join(append(errs, fmt.Errorf("%d sandboxes labelled %s still not ended: %w", left, label, ctx.Err()))...)
		}
	}
}

func scaleEnded(status string) bool { return status == "terminated" || status == "failed" }

// printScaleReport prints the report: tables, or JSON with -o json.
func (a *app) printScaleReport(rep scaleReport) error {
	if a.output == "json" {
		return printJSON(a.out, rep)
	}
	fmt.Fprintf(a.out, "scaletest %s: %d sandboxes, %d SSH sessions, %d preview clients, %d preview WebSockets, %d terminals; a keystroke or request every %s per client; %s ramp, %s held\n\n",
		rep.RunID, rep.Sandboxes, rep.SSHSessions, rep.Previews, rep.WebSockets, rep.Terminals, time.Duration(rep.Interval*float64(time.Second)),
		time.Duration(rep.Ramp*float64(time.Second)), time.Duration(rep.Duration*float64(time.Second)))
	t := newTable(a.out, "LATENCY", "SAMPLES", "ERRORS", "P50 ms", "P95 ms", "P99 ms", "MAX ms")
	for _, r := range rep.Latencies {
		t.row(r.Name, r.Samples, r.Errors, fmt.Sprintf("%.2f", r.P50ms), fmt.Sprintf("%.2f", r.P95ms), fmt.Sprintf("%.2f", r.P99ms), fmt.Sprintf("%.2f", r.MaxMs))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if len(rep.Errors) > 0 {
		fmt.Fprintln(a.out)
		t := newTable(a.out, "ERROR", "COUNT", "FIRST")
		for _, e := range rep.Errors {
			t.row(e.Kind, e.Count, e.Example)
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	if len(rep.Server) > 0 {
		fmt.Fprintln(a.out)
		t := newTable(a.out, "SERVER", "START", "LOADED", "CHANGE")
		for _, s := range rep.Server {
			t.row(s.Name, fmt.Sprintf("%.1f", s.Start), fmt.Sprintf("%.1f", s.Loaded), fmt.Sprintf("%+.1f", s.Loaded-s.Start))
		}
		return t.flush()
	}
	return nil
}

// writeFileWith writes a file through write, removing it if that fails.
func writeFileWith(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := errors.Join(write(f), f.Close()); err != nil {
		os.Remove(path)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
