package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sbxedge/sbx/control/apiclient"
)

// readyConfig bounds the ready scenario.
type readyConfig struct {
	N       int
	Wakes   int
	Rounds  int
	Timeout time.Duration
}

func (c *readyConfig) Validate() error {
	var errs []error
	if c.N < 1 || c.N > 200 {
		errs = append(errs, errors.New("--n must be 1..200"))
	}
	if c.Wakes < 0 || c.Wakes > 50 {
		errs = append(errs, errors.New("--wakes must be 0..50"))
	}
	if c.Rounds < 1 || c.Rounds > 20 {
		errs = append(errs, errors.New("--rounds must be 1..20"))
	}
	if c.Timeout <= 0 || c.Timeout > 30*time.Minute {
		errs = append(errs, errors.New("--timeout must be (0, 30m]"))
	}
	return errors.Join(errs...)
}

// runReady measures the two floors polling used to set, on the real
// stack (control SQLite + edge in one process, as sbx dev): create→ready
// of a sandbox without a repo (POST until the ready event, one at a time,
// each deleted after), with the split by step the ready event carries;
// and a preview wake's overhead over the app's own start: an API client's
// GET of a suspended sandbox's private port, held until the app answers,
// minus the time the app itself took from its process start to listening
// (the app is this binary's readyAppCmd, which records when it listens;
// its start is its spawn by the sandbox's init).
func runReady(ctx context.Context, args []string) error {
	c := readyConfig{}
	fs := flag.NewFlagSet("loadtest ready", flag.ContinueOnError)
	fs.IntVar(&c.N, "n", 20, "creates per round")
	fs.IntVar(&c.Wakes, "wakes", 5, "wakes per round")
	fs.IntVar(&c.Rounds, "rounds", 3, "rounds; figures are medians with ranges over all rounds")
	fs.DurationVar(&c.Timeout, "timeout", 10*time.Minute, "bound on the whole run")
	var verbose bool
	fs.BoolVar(&verbose, "v", false, "print each wake's overhead and the edge's steps")
	if err := parseConfig(fs, args, &c); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	dir, err := os.MkdirTemp("", "sbx-loadtest-ready-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	st, err := startDevStack(ctx, dir)
	if err != nil {
		return err
	}
	defer st.close()

	var ready, overhead, overReady, readyGet, before, after, appStart, restored []time.Duration
	var stepLog []string
	steps, wakeSplit := map[string][]float64{}, map[string][]float64{}
	for round := range c.Rounds {
		for range c.N {
			d, split, err := createToReady(ctx, st.api)
			if err != nil {
				return fmt.Errorf("round %d: %w", round+1, err)
			}
			ready = append(ready, d)
			for k, v := range split {
				steps[k] = append(steps[k], v)
			}
		}
		if c.Wakes > 0 {
			w, err := wakes(ctx, st, dir, c.Wakes)
			if err != nil {
				return fmt.Errorf("round %d: %w", round+1, err)
			}
			for _, x := range w {
				overhead = append(overhead, x.total-x.app)
				overReady = append(overReady, x.total-x.app-x.readyGet)
				readyGet = append(readyGet, x.readyGet)
				before = append(before, x.before)
				after = append(after, x.after)
				appStart = append(appStart, x.app)
				if x.restored > 0 {
					restored = append(restored, x.restored)
				}
				stepLog = append(stepLog, x.steps)
				for k, v := range x.split {
					wakeSplit[k] = append(wakeSplit[k], v)
				}
			}
		}
	}
	fmt.Printf("sbx dev stack (control SQLite + local provider + edge in one process), %d rounds, median [range]\n", c.Rounds)
	fmt.Printf("  create→ready (no repo), %d creates:   %s   target ≤ 90 ms\n", len(ready), durRange(ready))
	printSplit("    ", steps)
	if len(overhead) > 0 {
		fmt.Printf("  wake overhead over the app's start, %d wakes: %s   target ≤ 20 ms\n", len(overhead), durRange(overhead))
		fmt.Printf("    less a ready GET's time:   %s   (a ready GET: %s)\n", durRange(overReady), durRange(readyGet))
		fmt.Printf("    GET → app spawned by init: %s\n", durRange(before))
		if len(restored) > 0 {
			// Whole milliseconds, as the edge's wake status has them.
			fmt.Printf("    wake → sandbox ready:      %s   (the edge's restoring step: control's restore and services push)\n", durRange(restored))
		}
		printSplit("      control: ", wakeSplit)
		fmt.Printf("    app spawned → listening:   %s\n", durRange(appStart))
		fmt.Printf("    app listening → answer:    %s\n", durRange(after))
		if verbose {
			for i, s := range stepLog {
				fmt.Printf("    wake %2d: %5.1f ms; edge steps (ms since its start) %s\n", i+1, float64(overhead[i].Microseconds())/1000, s)
			}
		}
	}
	return nil
}

// printSplit prints each step's median and range, by name.
func printSplit(indent string, steps map[string][]float64) {
	var names []string
	for k := range steps {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		v := steps[k]
		fmt.Printf("%sstep %-12s %7.1f ms [%.1f – %.1f]\n", indent, k, median(v), slices.Min(v), slices.Max(v))
	}
}

func durRange(v []time.Duration) string {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return fmt.Sprintf("%7.1f ms [%.1f – %.1f]", ms(median(v)), ms(slices.Min(v)), ms(slices.Max(v)))
}

// createToReady creates a sandbox, waits for its ready event and deletes
// it; it returns the time from the POST to the event and the ready
// event's split by step ("steps: name=1.2ms ...").
func createToReady(ctx context.Context, api *apiclient.ClientWithResponses) (time.Duration, map[string]float64, error) {
	start := time.Now()
	created, err := apiclient.Result(api.CreateSandboxWithResponse(ctx, nil, apiclient.CreateSandbox{}))
	if err != nil {
		return 0, nil, fmt.Errorf("create sandbox: %w", err)
	}
	id := created.JSON201.Id
	defer func() { _, _ = api.DeleteSandboxWithResponse(context.WithoutCancel(ctx), id, nil) }()
	var msg string
	err = apiclient.WatchEvents(ctx, api, id, 0, func(e apiclient.Event) (bool, error) {
		if e.State != nil && *e.State == "ready" {
			if e.Message != nil {
				msg = *e.Message
			}
			return false, nil
		}
		return true, nil
	})
	took := time.Since(start)
	if err != nil {
		return 0, nil, fmt.Errorf("wait for %s ready: %w", id, err)
	}
	return took, parseSteps(msg), nil
}

// parseSteps reads "steps: a=1.2ms b=3.0ms" into milliseconds by name.
func parseSteps(msg string) map[string]float64 {
	out := map[string]float64{}
	rest, ok := strings.CutPrefix(msg, "steps: ")
	if !ok {
		return out
	}
	for _, f := range strings.Fields(rest) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			continue
		}
		if ms, err := strconv.ParseFloat(strings.TrimSuffix(v, "ms"), 64); err == nil {
			out[k] = ms
		}
	}
	return out
}

// wake is one wake's figures.
type wake struct {
	total    time.Duration      // the GET, from its start to the answer's end
	app      time.Duration      // the app's spawn by the init to its listening
	before   time.Duration      // the GET's start to the app's spawn
	after    time.Duration      // the app listening to the answer's end
	readyGet time.Duration      // the median of 3 GETs just before, the sandbox ready
	steps    string             // the edge's wake steps, as its status endpoint says
	restored time.Duration      // the edge's restoring step: until control said ready (0: not seen)
	split    map[string]float64 // the restore's ready event's split by step, ms
}

// wakes creates a sandbox whose service is readyAppCmd on a private
// port, and wakes it n times through its preview.
func wakes(ctx context.Context, st *devStack, dir string, n int) ([]wake, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	marks, err := os.CreateTemp(dir, "app-marks-")
	if err != nil {
		return nil, err
	}
	marks.Close()
	args := []string{readyAppCmd, marks.Name()}
	svcs := []apiclient.ServiceDeclaration{{Name: "app", Command: exe, Args: &args, Port: &port}}
	created, err := apiclient.Result(st.api.CreateSandboxWithResponse(ctx, nil, apiclient.CreateSandbox{Services: &svcs}))
	if err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	id := created.JSON201.Id
	defer func() { _, _ = st.api.DeleteSandboxWithResponse(context.WithoutCancel(ctx), id, nil) }()
	if err := waitState(ctx, st.api, id, "ready", 0); err != nil {
		return nil, err
	}
	access := apiclient.PortRequestAccess("private")
	r, err := apiclient.Result(st.api.ExposePortWithResponse(ctx, id, apiclient.PortRequest{Port: port, Access: &access}))
	if err != nil {
		return nil, fmt.Errorf("expose port: %w", err)
	}
	p := r.JSON201
	if p == nil {
		p = r.JSON200
	}
	u, err := url.Parse(p.Url)
	if err != nil {
		return nil, err
	}
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, st.previewAddr)
		},
		DisableKeepAlives: true,
	}}
	get := func() error {
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+u.Host+"/", nil)
		req.Header.Set("Authorization", "Bearer "+st.token)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != 200 {
			return fmt.Errorf("preview GET: %s", resp.Status)
		}
		return nil
	}
	// The app answers once after the create, as a user's first visit.
	if err := retryGet(ctx, get); err != nil {
		return nil, err
	}
	var out []wake
	lastEvent := 0
	for range n {
		// The baseline: the same GET of the app while the sandbox is
		// ready (a new client connection each, as the woken GET).
		var readyGets []time.Duration
		for range 3 {
			t0 := time.Now()
			if err := get(); err != nil {
				return nil, fmt.Errorf("ready GET: %w", err)
			}
			readyGets = append(readyGets, time.Since(t0))
		}
		if _, err := apiclient.Result(st.api.SuspendSandboxWithResponse(ctx, id)); err != nil {
			return nil, fmt.Errorf("suspend: %w", err)
		}
		// Only a suspended event after the last wake's ready: one from
		// 0 finds the previous suspend's, and the GET would be sent
		// while the sandbox is still suspending, the wake timing the
		// suspend's tail as well as itself.
		if err := waitState(ctx, st.api, id, "suspended", lastEvent); err != nil {
			return nil, err
		}
		start := time.Now()
		if err := get(); err != nil {
			return nil, fmt.Errorf("woken GET: %w", err)
		}
		end := time.Now()
		_, listening, err := lastMarks(marks.Name())
		if err != nil {
			return nil, err
		}
		// The app's start is its spawn by the sandbox's init, which the
		// service's last start records: an exec and a runtime's start
		// (tens of ms for a Go binary on a loaded machine) are the app's.
		svc, err := apiclient.Result(st.api.GetServiceWithResponse(ctx, id, "app"))
		if err != nil || svc.JSON200.LastStartAt == nil {
			return nil, fmt.Errorf("the app's last start: %w", err)
		}
		appStart := *svc.JSON200.LastStartAt
		if appStart.Before(start) {
			return nil, fmt.Errorf("the app's last start %v is before the wake's GET %v: it did not restart", appStart, start)
		}
		steps, restored, err := wakeSteps(ctx, client, u.Host, st.token)
		if err != nil {
			return nil, err
		}
		var split map[string]float64
		if split, lastEvent, err = restoreSplit(ctx, st.api, id, lastEvent); err != nil {
			return nil, err
		}
		out = append(out, wake{total: end.Sub(start), app: listening.Sub(appStart), before: appStart.Sub(start), after: end.Sub(listening),
			readyGet: median(readyGets), steps: steps, restored: restored, split: split})
	}
	return out, nil
}

// restoreSplit is the split by step of the first ready event a wake made
// after event after (control's side of the wake, from its
// wake call to its move to ready), and that event's id.
func restoreSplit(ctx context.Context, api *apiclient.ClientWithResponses, id string, after int) (map[string]float64, int, error) {
	var split map[string]float64
	last := after
	err := apiclient.WatchEvents(ctx, api, id, after, func(e apiclient.Event) (bool, error) {
		last = e.Id
		if e.State == nil || *e.State != "ready" || e.Reason == nil || *e.Reason != "wake" {
			return true, nil
		}
		if e.Message != nil {
			split = parseSteps(*e.Message)
		}
		return false, nil
	})
	if err != nil {
		return nil, after, fmt.Errorf("restore's ready event: %w", err)
	}
	return split, last, nil
}

// wakeSteps is the last wake's steps from the preview's status endpoint,
// as "step@ms" in order, and how long its restoring step took: the
// start of the step after it (0 if there was none).
func wakeSteps(ctx context.Context, client *http.Client, host, token string) (string, time.Duration, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+host+"/__sbx_preview/wake-status", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return "", 0, fmt.Errorf("wake status: %w", err)
	}
	defer resp.Body.Close()
	var st struct {
		Steps []struct {
			Step string `json:"step"`
			AtMS int64  `json:"at_ms"`
		} `json:"steps"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return "", 0, fmt.Errorf("wake status: %w", err)
	}
	var parts []string
	var restored time.Duration
	for i, s := range st.Steps {
		parts = append(parts, s.Step+"@"+strconv.FormatInt(s.AtMS, 10))
		if i > 0 && st.Steps[i-1].Step == "restoring" {
			restored = time.Duration(s.AtMS) * time.Millisecond
		}
	}
	return strings.Join(parts, " "), restored, nil
}

// retryGet tries get for up to 10 s: the service starts after ready.
func retryGet(ctx context.Context, get func() error) error {
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err = get(); err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return fmt.Errorf("first GET: %w", err)
}

// waitState follows id's events after event after until it is in state
// want.
func waitState(ctx context.Context, api *apiclient.ClientWithResponses, id, want string, after int) error {
	cur, err := apiclient.Result(api.GetSandboxWithResponse(ctx, id))
	if err != nil {
		return err
	}
	if string(cur.JSON200.Status) == want {
		return nil
	}
	err = apiclient.WatchEvents(ctx, api, id, after, func(e apiclient.Event) (bool, error) {
		return e.State == nil || string(*e.State) != want, nil
	})
	if err != nil {
		return fmt.Errorf("wait for %s %s: %w", id, want, err)
	}
	return nil
}

// lastMarks reads the last line readyApp wrote: its start and its
// listening, in Unix nanoseconds.
func lastMarks(path string) (start, listening time.Time, err error) {
	f, err := os.Open(path)
	if err != nil {
		return start, listening, err
	}
	defer f.Close()
	var last string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		last = sc.Text()
	}
	a, b, ok := strings.Cut(last, " ")
	s, err1 := strconv.ParseInt(a, 10, 64)
	l, err2 := strconv.ParseInt(b, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return start, listening, fmt.Errorf("app marks %q: want two Unix nanosecond times", last)
	}
	return time.Unix(0, s), time.Unix(0, l), nil
}

// readyAppCmd is the app of the wake figure, run by the sandbox's init as
// its service: it listens on $PORT and answers 200, and appends to the
// file its argument names its process start and the moment it listened.
const readyAppCmd = "ready-app"

func runReadyApp(ctx context.Context, args []string) error {
	start := time.Now()
	if len(args) != 1 {
		return errors.New("usage: ready-app MARKS-FILE")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+os.Getenv("PORT"))
	if err != nil {
		return err
	}
	listening := time.Now()
	f, err := os.OpenFile(filepath.Clean(args[0]), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "%d %d\n", start.UnixNano(), listening.UnixNano())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ready\n")
	}), ReadHeaderTimeout: 10 * time.Second}
	context.AfterFunc(ctx, func() { _ = srv.Close() })
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
