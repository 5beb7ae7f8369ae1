package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// scaleCmd is the real binary running sbx scaletest against p.
func (p *devProc) scaleCmd(args ...string) *exec.Cmd {
	cmd := exec.Command(sbxBinary(p.t), append([]string{"scaletest"}, args...)...)
	cmd.Env = append(os.Environ(), "SBX_API="+p.API, "SBX_TOKEN="+p.Token, "SBX_CONFIG_DIR="+filepath.Join(p.DataDir, "cli-config"))
	return cmd
}

// liveLabelled lists the sandboxes labelled label (key=value) that have
// not ended.
func (p *devProc) liveLabelled(label string) []string {
	p.t.Helper()
	var list struct {
		Sandboxes []sbView `json:"sandboxes"`
	}
	if code := p.call("GET", "/api/v1/sandboxes?label="+url.QueryEscape(label), nil, &list); code != 200 {
		p.t.Fatalf("list label %s: status %d", label, code)
	}
	var live []string
	for _, sb := range list.Sandboxes {
		if !scaleEnded(sb.Status) {
			live = append(live, sb.ID+" "+sb.Status)
		}
	}
	return live
}

// startedScale runs sbx scaletest and returns once its clients started
// (its stderr says so), with the run's ID.
func startedScale(t *testing.T, cmd *exec.Cmd) (runID string, wait func() error) {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	rest := &lockedBuffer{}
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			rest.Write([]byte(sc.Text() + "\n"))
			lines <- sc.Text()
		}
	}()
	started := regexp.MustCompile(`^scaletest ([a-z0-9]+): starting \d+ clients`)
	timeout := time.After(90 * time.Second)
	for runID == "" {
		select {
		case line, ok := <-lines:
			if !ok {
				_ = cmd.Wait()
				t.Fatalf("sbx scaletest ended before its clients started:\n%s", rest.String())
			}
			if m := started.FindStringSubmatch(line); m != nil {
				runID = m[1]
			}
		case <-timeout:
			_ = cmd.Process.Kill()
			t.Fatalf("sbx scaletest: no clients started after 90s:\n%s", rest.String())
		}
	}
	return runID, func() error {
		for range lines {
		}
		err := cmd.Wait()
		if err != nil {
			t.Logf("sbx scaletest stderr:\n%s", rest.String())
		}
		return err
	}
}

// TestScaleTestAgainstDev runs sbx scaletest against a real sbx dev (small
// N): every latency it reports has samples and no error (SSH through the
// broker, preview requests and WebSockets through the preview proxy to a
// server in the sandbox, a terminal stream), the server's figures are read, the plot is SVG, and no labelled sandbox is left
// live, whether the run ends by itself, is interrupted (SIGINT) or is
// killed and cleaned up after with --cleanup.
func TestScaleTestAgainstDev(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatal("python3 is required (apt-get install python3)")
	}
	p := startDev(t, t.TempDir(), "")
	plot := filepath.Join(t.TempDir(), "scale.svg")

	cmd := p.scaleCmd("--sandboxes", "2", "--ssh-sessions", "2", "--previews", "2", "--websockets", "1",
		"--terminals", "1", "--duration", "5s", "--ramp", "1s", "--metrics", p.Metrics+"/metrics", "--plot", plot, "-o", "json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("sbx scaletest: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	var rep scaleReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("-o json: %v\n%s", err, stdout.String())
	}
	got := map[string]latencyRow{}
	for _, r := range rep.Latencies {
		got[r.Name] = r
	}
	for _, kind := range scaleKinds {
		r, ok := got[kind]
		if !ok || r.Samples == 0 || r.Errors != 0 || r.P50ms <= 0 || r.P99ms < r.P50ms {
			t.Errorf("%s: %+v, want samples, no errors, 0 < p50 <= p99", kind, r)
		}
	}
	// 2 sessions with a keystroke every 100 ms for 5 s at least.
	if n := got[kindSSHEcho].Samples; n < 40 {
		t.Errorf("ssh keystroke echo: %d samples, want the trickle held for the run (≥ 40)", n)
	}
	if len(rep.Errors) != 0 {
		t.Errorf("errors: %+v, want none", rep.Errors)
	}
	server := map[string]serverRow{}
	for _, s := range rep.Server {
		server[s.Metric] = s
	}
	if s := server["sbx_sshbroker_connections_open"]; s.Loaded < 2 {
		t.Errorf("server: %+v, want the broker holding the 2 sessions with the load held", s)
	}
	if s := server["sbx_preview_websockets_open"]; s.Loaded < 1 {
		t.Errorf("server: %+v, want the preview proxy relaying the WebSocket with the load held", s)
	}
	if s := server["go_goroutines"]; s.Start <= 0 || s.Loaded <= s.Start {
		t.Errorf("server goroutines: %+v, want more with the load held", s)
	}

	// The table shows the same rows.
	var table bytes.Buffer
	a := newApp(nil, &table, io.Discard)
	a.output = "table"
	if err := a.printScaleReport(rep); err != nil {
		t.Fatal(err)
	}
	for _, kind := range scaleKinds {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(kind) + `\s+[1-9]\d*\s+0\s`).MatchString(table.String()) {
			t.Errorf("table has no row %q with samples and 0 errors:\n%s", kind, table.String())
		}
	}

	checkSVG(t, plot)
	if live := p.liveLabelled(scaleRunLabel + "=" + rep.RunID); len(live) != 0 {
		t.Errorf("after the run: %v still live", live)
	}

	// Ctrl-C mid-run: exit 130, its sandboxes destroyed.
	cmd = p.scaleCmd("--sandboxes", "2", "--ssh-sessions", "1", "--previews", "1", "--websockets", "1", "--terminals", "1", "--duration", "60s")
	runID, wait := startedScale(t, cmd)
	time.Sleep(time.Second)
	if live := p.liveLabelled(scaleRunLabel + "=" + runID); len(live) != 2 {
		t.Fatalf("mid-run: live %v, want the run's 2 sandboxes", live)
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	var ee *exec.ExitError
	if err := wait(); !errors.As(err, &ee) || ee.ExitCode() != exitInterrupted {
		t.Errorf("after SIGINT: %v, want exit %d", err, exitInterrupted)
	}
	if live := p.liveLabelled(scaleRunLabel + "=" + runID); len(live) != 0 {
		t.Errorf("after SIGINT: %v still live", live)
	}

	// A crashed run (SIGKILL) leaves its sandboxes; --cleanup ends them.
	cmd = p.scaleCmd("--sandboxes", "1", "--ssh-sessions", "1", "--previews", "0", "--websockets", "0", "--duration", "60s")
	runID, wait = startedScale(t, cmd)
	_ = cmd.Process.Kill()
	_ = wait()
	if live := p.liveLabelled(scaleRunLabel + "=" + runID); len(live) != 1 {
		t.Fatalf("after SIGKILL: live %v, want the run's sandbox left", live)
	}
	out, err := p.scaleCmd("--cleanup").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "destroyed 1 scale-test sandboxes") {
		t.Errorf("sbx scaletest --cleanup: %v %q", err, out)
	}
	if live := p.liveLabelled(scaleLabel + "=true"); len(live) != 0 {
		t.Errorf("after --cleanup: %v still live", live)
	}
}

// checkSVG parses path as XML: an svg root with a p50 and a p99 line for
// each of the plotted latencies.
func checkSVG(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(b))
	root, polylines := "", 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("plot: not XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
			}
			if se.Name.Local == "polyline" {
				polylines++
			}
		}
	}
	if root != "svg" || polylines != 2*len(plottedKinds) {
		t.Errorf("plot: root %q with %d polylines, want svg with %d", root, polylines, 2*len(plottedKinds))
	}
}
