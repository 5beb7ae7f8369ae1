package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// The macOS soak the product spec asks before macOS sandboxes are called
// stable: M VMs driven through the tart CLI for hours on an agent-like
// workload, watching for kernel panics on the host, memory pressure
// (vm_stat) and how long a VM takes to come back after a restart. Pass =
// zero panics, peak memory under a ceiling, recovery under a limit, K
// consecutive runs. On this Linux machine it drives the fake tart
// (make faketart) and the host probes say they are not available.

func init() {
	commands = append(commands, command{
		name:    "macos-soak",
		summary: "M macOS VMs through the tart CLI for H hours (idle, build bursts, file I/O, preview traffic): kernel panics, vm_stat pressure, recovery; writes a markdown report",
		run:     runMacSoak,
	})
}

type macSoakConfig struct {
	vms         int
	hours       float64
	duration    time.Duration
	tart        string
	base        string
	runs        int
	maxPanics   int
	memCeiling  float64
	recoveryMax time.Duration
	report      string
	phase       time.Duration
	panicDir    string
}

func (c *macSoakConfig) Validate() error {
	switch {
	case c.vms < 1 || c.vms > 64:
		return errors.New("-vms: want 1..64 (Apple's licence allows 2 macOS VMs per host)")
	case c.duration <= 0 && (c.hours <= 0 || c.hours > 168):
		return errors.New("-hours: want 0 < H <= 168, or set -duration")
	case c.runs < 1 || c.runs > 100:
		return errors.New("-runs: want 1..100")
	case c.memCeiling <= 0 || c.memCeiling > 1:
		return errors.New("-mem-ceiling: a fraction of host memory in (0, 1]")
	case c.recoveryMax <= 0 || c.phase <= 0:
		return errors.New("-recovery-max and -phase must be positive")
	case c.base == "":
		return errors.New("-base: name the VM (or OCI image) each soak VM is cloned from")
	}
	return nil
}

func (c *macSoakConfig) length() time.Duration {
	if c.duration > 0 {
		return c.duration
	}
	return time.Duration(c.hours * float64(time.Hour))
}

func runMacSoak(ctx context.Context, args []string) error {
	c := macSoakConfig{}
	fs := flag.NewFlagSet("macos-soak", flag.ContinueOnError)
	fs.IntVar(&c.vms, "vms", 2, "concurrent VMs (2 is Apple's per-host licence limit)")
	fs.Float64Var(&c.hours, "hours", 1, "length of each run in hours")
	fs.DurationVar(&c.duration, "duration", 0, "length of each run (overrides -hours; for short runs)")
	fs.StringVar(&c.tart, "tart", "", "tart CLI (default: tart on PATH; on Linux, bin/tart from make faketart)")
	fs.StringVar(&c.base, "base", "ghcr.io/cirruslabs/macos-sequoia-base:latest", "VM or image each soak VM is cloned from")
	fs.IntVar(&c.runs, "runs", 1, "K: consecutive runs that must all pass")
	fs.IntVar(&c.maxPanics, "max-panics", 0, "kernel panic reports allowed per run")
	fs.Float64Var(&c.memCeiling, "mem-ceiling", 0.90, "peak host memory in use (vm_stat), as a fraction, allowed per run")
	fs.DurationVar(&c.recoveryMax, "recovery-max", 90*time.Second, "longest a VM may take to answer again after a restart")
	fs.StringVar(&c.report, "report", "macos-soak-report.md", "markdown report to write")
	fs.DurationVar(&c.phase, "phase", 30*time.Second, "length of one workload phase (idle, build, file I/O, preview)")
	fs.StringVar(&c.panicDir, "panic-dir", "/Library/Logs/DiagnosticReports", "where macOS writes kernel panic reports (Kernel*)")
	if err := parseConfig(fs, args, &c); err != nil {
		return err
	}
	tart, err := findTart(c.tart)
	if err != nil {
		return err
	}
	host := newHostProbe(c.panicDir)
	var results []soakRun
	for k := range c.runs {
		r, err := c.soakOnce(ctx, tart, host, k+1)
		if err != nil {
			return fmt.Errorf("run %d: %w", k+1, err)
		}
		results = append(results, r)
		printSoakRun(os.Stdout, r, c)
		if !r.pass(c) {
			break // K consecutive passes are needed; a failure ends the series
		}
	}
	md := soakMarkdown(results, c, tart, host)
	if err := os.WriteFile(c.report, []byte(md), 0o644); err != nil {
		return err
	}
	fmt.Printf("\nreport: %s\n", c.report)
	for _, r := range results {
		if !r.pass(c) {
			return fmt.Errorf("run %d failed the pass criteria (see %s)", r.n, c.report)
		}
	}
	if len(results) < c.runs {
		return fmt.Errorf("%d of %d runs", len(results), c.runs)
	}
	return nil
}

// findTart resolves -tart or tart on PATH, with an error that says what
// to do on each kind of host.
func findTart(flagPath string) (string, error) {
	if flagPath != "" {
		if st, err := os.Stat(flagPath); err != nil || st.IsDir() {
			return "", fmt.Errorf("-tart %s: not an executable file", flagPath)
		}
		return flagPath, nil
	}
	p, err := exec.LookPath("tart")
	if err != nil {
		return "", errors.New("no tart CLI on PATH and no -tart given: on a Mac install Tart (brew install cirruslabs/cli/tart); on Linux build the fake with `make faketart` and pass -tart bin/tart")
	}
	return p, nil
}

// soakRun is one run's outcome.
type soakRun struct {
	n        int
	length   time.Duration
	vms      []*soakVM
	panics   int
	panicMsg string
	memPeak  float64 // fraction of host memory in use; -1 when unknown
	memNote  string
}

func (r soakRun) pass(c macSoakConfig) bool {
	if r.panics > c.maxPanics || (r.memPeak >= 0 && r.memPeak > c.memCeiling) {
		return false
	}
	for _, v := range r.vms {
		if v.failed != "" || v.recovery > c.recoveryMax || v.recovery == 0 {
			return false
		}
	}
	return true
}

// soakVM is one VM's tally.
type soakVM struct {
	name                  string
	boot, recovery        time.Duration
	execs, execErrs       int
	builds, ios, previews int
	previewErrs           int
	execLat               []time.Duration
	failed                string
	mu                    sync.Mutex
}

func (v *soakVM) fail(format string, args ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.failed == "" {
		v.failed = fmt.Sprintf(format, args...)
	}
}

func (c *macSoakConfig) soakOnce(ctx context.Context, tart string, host *hostProbe, n int) (soakRun, error) {
	run := soakRun{n: n, length: c.length(), memPeak: -1}
	before := host.panicReports()
	ctx, cancel := context.WithTimeout(ctx, c.length()+10*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for i := range c.vms {
		v := &soakVM{name: fmt.Sprintf("sbx-soak-%d-%d-%d", os.Getpid(), n, i)}
		run.vms = append(run.vms, v)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.driveVM(ctx, tart, v, c.length())
		}()
	}
	// The host probe samples memory while the VMs work.
	probeCtx, stopProbe := context.WithCancel(ctx)
	probeDone := make(chan struct{})
	go func() {
		defer close(probeDone)
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			if frac, note := host.memoryInUse(ctx); frac > run.memPeak || note != "" {
				run.memPeak, run.memNote = max(run.memPeak, frac), note
			}
			select {
			case <-probeCtx.Done():
				return
			case <-t.C:
			}
		}
	}()
	wg.Wait()
	stopProbe()
	<-probeDone
	after := host.panicReports()
	if before == nil || after == nil {
		run.panics, run.panicMsg = 0, "not available on this host (no "+host.panicDir+")"
	} else {
		for name := range after {
			if !before[name] {
				run.panics++
				run.panicMsg += name + " "
			}
		}
	}
	return run, nil
}

// driveVM clones, boots and works one VM for d, restarts it once midway
// (the recovery drill), then stops and deletes it.
func (c *macSoakConfig) driveVM(ctx context.Context, tart string, v *soakVM, d time.Duration) {
	cleanup := func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_, _ = tartCmd(cctx, tart, "stop", v.name)
		_, _ = tartCmd(cctx, tart, "delete", v.name)
	}
	if _, err := tartCmd(ctx, tart, "clone", c.base, v.name); err != nil {
		v.fail("clone: %v", err)
		return
	}
	defer cleanup()
	t := time.Now()
	stopRun, err := startVM(ctx, tart, v.name)
	if err != nil {
		v.fail("run: %v", err)
		return
	}
	defer func() { stopRun() }()
	if err := waitUsable(ctx, tart, v.name, c.recoveryMax*2); err != nil {
		v.fail("boot: %v", err)
		return
	}
	v.boot = time.Since(t)
	end := time.Now().Add(d)
	drilled := false
	phases := []string{"idle", "build", "io", "preview"}
	for i := 0; time.Now().Before(end) && ctx.Err() == nil; i++ {
		if !drilled && time.Now().After(end.Add(-d/2)) {
			// Recovery drill: stop the VM as a crash or host hiccup would,
			// start it again, time until it answers exec.
			drilled = true
			stopRun()
			t := time.Now()
			if stopRun, err = startVM(ctx, tart, v.name); err != nil {
				v.fail("restart: %v", err)
				return
			}
			if err := waitUsable(ctx, tart, v.name, c.recoveryMax*2); err != nil {
				v.fail("recovery: %v", err)
				return
			}
			v.recovery = time.Since(t)
		}
		c.phaseWork(ctx, tart, v, phases[i%len(phases)], min(c.phase, time.Until(end)))
	}
	if !drilled {
		v.fail("run too short for the recovery drill")
	}
}

// phaseWork runs one workload phase on v.
func (c *macSoakConfig) phaseWork(ctx context.Context, tart string, v *soakVM, phase string, d time.Duration) {
	end := time.Now().Add(d)
	do := func(script string) {
		t := time.Now()
		_, err := tartCmd(ctx, tart, "exec", v.name, "sh", "-c", script)
		v.mu.Lock()
		v.execs++
		v.execLat = append(v.execLat, time.Since(t))
		if err != nil {
			v.execErrs++
		}
		v.mu.Unlock()
	}
	switch phase {
	case "idle":
		// An agent thinking: a heartbeat exec every few seconds.
		for time.Now().Before(end) && ctx.Err() == nil {
			do("true")
			sleepCtx(ctx, min(5*time.Second, time.Until(end)))
		}
	case "build":
		// A compile burst: every core busy for the phase.
		secs := max(1, int(d.Seconds()))
		do(fmt.Sprintf(`n=$(sysctl -n hw.ncpu 2>/dev/null || nproc); i=0; while [ $i -lt $n ]; do (end=$(($(date +%%s)+%d)); while [ $(date +%%s) -lt $end ]; do :; done) & i=$((i+1)); done; wait`, secs))
		v.builds++
	case "io":
		// Checkout and build products: write, read back, delete.
		for time.Now().Before(end) && ctx.Err() == nil {
			do(`f=$(mktemp); dd if=/dev/zero of=$f bs=1048576 count=64 2>/dev/null && cat $f > /dev/null; rm -f $f`)
			v.ios++
		}
	case "preview":
		// A dev server answering preview traffic: one request a second to
		// a server in the guest, measured from the host.
		// Bound to the guest's own address: on a Mac that is the VM's
		// NIC; under the fake, each VM's loopback address, so two VMs'
		// servers do not collide.
		ip, err := tartCmd(ctx, tart, "ip", v.name)
		if err != nil {
			v.fail("ip: %v", err)
			return
		}
		do(fmt.Sprintf(`(python3 -m http.server --bind %s 8080 >/dev/null 2>&1 &) ; sleep 1`, strings.TrimSpace(ip)))
		for time.Now().Before(end) && ctx.Err() == nil {
			v.previews++
			if err := previewGet(ctx, tart, v.name); err != nil {
				v.previewErrs++
			}
			sleepCtx(ctx, min(time.Second, time.Until(end)))
		}
	}
}

// tartCmd runs tart with a bound on how long one call may take.
func tartCmd(ctx context.Context, tart string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, tart, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("tart %s: %w: %s", args[0], err, strings.TrimSpace(lastLine(string(out))))
	}
	return string(out), nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// startVM runs `tart run --no-graphics name` in the background; the
// returned func stops the VM and waits for the process.
func startVM(ctx context.Context, tart, name string) (func(), error) {
	cmd := exec.Command(tart, "run", "--no-graphics", name)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	var once sync.Once
	return func() {
		once.Do(func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			_, _ = tartCmd(sctx, tart, "stop", name)
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		})
	}, nil
}

// waitUsable polls `tart ip` and then an exec until both answer.
func waitUsable(ctx context.Context, tart, name string, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var last error
	for {
		if _, err := tartCmd(ctx, tart, "ip", name); err != nil {
			last = err
		} else if _, err := tartCmd(ctx, tart, "exec", name, "true"); err != nil {
			last = err
		} else {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not usable after %s: %w", limit, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func printSoakRun(w io.Writer, r soakRun, c macSoakConfig) {
	fmt.Fprintf(w, "\nrun %d of %d: %d VMs for %s\n", r.n, c.runs, len(r.vms), r.length)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VM\tboot s\trecovery s\texecs\texec errors\texec p50 ms\texec p99 ms\tbuilds\tI/O rounds\tpreview reqs\tpreview errors\tfailure")
	for _, v := range r.vms {
		p50, p99 := pctl(v.execLat, 0.5), pctl(v.execLat, 0.99)
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", v.name, v.boot.Seconds(), v.recovery.Seconds(),
			v.execs, v.execErrs, p50.Milliseconds(), p99.Milliseconds(), v.builds, v.ios, v.previews, v.previewErrs, orDash(v.failed))
	}
	tw.Flush()
	fmt.Fprintf(w, "kernel panics: %s\n", panicLine(r))
	fmt.Fprintf(w, "memory pressure: %s\n", memLine(r, c))
	verdict := "PASS"
	if !r.pass(c) {
		verdict = "FAIL"
	}
	fmt.Fprintf(w, "run %d: %s\n", r.n, verdict)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func panicLine(r soakRun) string {
	if r.panicMsg != "" && r.panics == 0 {
		return r.panicMsg
	}
	if r.panics == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%s)", r.panics, strings.TrimSpace(r.panicMsg))
}

func memLine(r soakRun, c macSoakConfig) string {
	if r.memPeak < 0 {
		return r.memNote
	}
	return fmt.Sprintf("peak %.0f%% of host memory in use (ceiling %.0f%%)", r.memPeak*100, c.memCeiling*100)
}

func pctl(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// soakMarkdown is the report a PR carries.
func soakMarkdown(runs []soakRun, c macSoakConfig, tart string, host *hostProbe) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# macOS soak report\n\n")
	fmt.Fprintf(&b, "- host: %s; tart: `%s`; base: `%s`\n", host.describe(), tart, c.base)
	fmt.Fprintf(&b, "- %d VMs, %s per run, phases of %s (idle, build burst, file I/O, preview traffic), a restart drill midway\n", c.vms, c.length(), c.phase)
	fmt.Fprintf(&b, "- pass: kernel panics <= %d, peak memory <= %.0f%%, recovery <= %s, %d consecutive runs\n\n", c.maxPanics, c.memCeiling*100, c.recoveryMax, c.runs)
	fmt.Fprintf(&b, "| run | VM | boot s | recovery s | execs | exec errors | exec p99 ms | builds | I/O | preview reqs | preview errors | failure |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range runs {
		for _, v := range r.vms {
			fmt.Fprintf(&b, "| %d | %s | %.1f | %.1f | %d | %d | %d | %d | %d | %d | %d | %s |\n", r.n, v.name, v.boot.Seconds(), v.recovery.Seconds(),
				v.execs, v.execErrs, pctl(v.execLat, 0.99).Milliseconds(), v.builds, v.ios, v.previews, v.previewErrs, orDash(v.failed))
		}
	}
	b.WriteString("\n| run | kernel panics | memory | result |\n|---|---|---|---|\n")
	passed := 0
	for _, r := range runs {
		res := "FAIL"
		if r.pass(c) {
			res, passed = "PASS", passed+1
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %s |\n", r.n, panicLine(r), memLine(r, c), res)
	}
	verdict := "PASS"
	if passed < c.runs {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "\n**%s**: %d of %d consecutive runs passed.\n", verdict, passed, c.runs)
	if host.goos != "darwin" {
		b.WriteString("\nThis run was not on macOS: the VMs were the fake tart's and the panic and vm_stat probes were not available, so it checks the harness, not macOS. Real figures need a Mac.\n")
	}
	return b.String()
}
