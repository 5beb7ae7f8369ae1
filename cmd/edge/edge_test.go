package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control"
	"github.com/sbxedge/sbx/control/controltest"
	"github.com/sbxedge/sbx/edge"
	"github.com/sbxedge/sbx/internal/testkit/metrictest"
	"github.com/sbxedge/sbx/internal/testkit/servicetest"
	"github.com/sbxedge/sbx/internal/testkit/sshscenario"
)

const testSecret = "edge-test-secret-edge-test-secret-0123"

// stack is control (public + internal listeners) and an edge in front of
// it, both in this process, talking over loopback HTTP and SSH exactly as
// separate deployments would.
type stack struct {
	api, token string
	edgeSSH    string
	edgeHTTP   string
	edgeMetric string
	edgeEgress string // "" unless started with --egress-listen
	dir        string
	svc        *control.Service
}

// startStack starts control and an edge; extra are more edge flags.
func startStack(t *testing.T, extra ...string) *stack {
	t.Helper()
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := context.WithCancel(context.Background())
	// The edge's SSH port must be known to control (it is in every
	// ssh_tokens answer), so reserve it first.
	sshLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sshAddr := sshLn.Addr().(*net.TCPAddr)
	sshLn.Close()

	svc, tok := controltest.Start(t, control.Config{
		DataDir: filepath.Join(dir, "control"), InternalAddr: "127.0.0.1:0", InternalSecret: testSecret,
		SSHHost: "127.0.0.1", SSHPort: sshAddr.Port, Logger: log.With("side", "control"),
	})
	st := &stack{api: svc.URL(), token: tok, edgeSSH: sshAddr.String(), dir: dir, svc: svc}

	cfg, _, err := parseConfig(append([]string{
		"--ssh-addr", sshAddr.String(), "--http-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0",
		"--control-url", svc.InternalURL(),
		"--host-key-dir", filepath.Join(dir, "edge-hostkeys"),
		// The CA key file control made, as a shared Secret would mount it.
		"--ca-key-file", filepath.Join(dir, "control", "keys", "user_ca"),
		"--ssh-drain", "1s",
		// Control's activity here is its own in-memory store, which an edge
		// process cannot share; the tests suspend and wake explicitly.
		"--no-activity",
	}, extra...), func(k string) string {
		if k == "SBX_INTERNAL_SECRET" {
			return testSecret
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	e := runEdge(t, ctx, cancel, cfg, log)
	st.edgeHTTP, st.edgeMetric = e.HTTPAddr().String(), e.MetricsAddr().String()
	if a := e.EgressAddr(); a != nil {
		st.edgeEgress = a.String()
	}
	return st
}

// runEdge runs the edge until the test ends and returns it; it stops
// before control (controltest) behind it.
func runEdge(t *testing.T, ctx context.Context, cancel context.CancelFunc, cfg edge.Config, log *slog.Logger) *edge.Edge {
	t.Helper()
	cfg.Logger = log.With("side", "edge")
	e, edgeDone := servicetest.Start(t, "edge", func(ready func(*edge.Edge)) error { return edge.Run(ctx, cfg, ready) })
	t.Cleanup(func() {
		cancel()
		if err := <-edgeDone; err != nil {
			t.Errorf("edge run: %v", err)
		}
	})
	return e
}

type testLog struct{ t *testing.T }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (s *stack) call(t *testing.T, method, path string, in, out any) int {
	t.Helper()
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.api+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
	return resp.StatusCode
}

func (s *stack) readySandbox(t *testing.T) string {
	t.Helper()
	var sb struct{ ID, Status string }
	if code := s.call(t, "POST", "/api/v1/sandboxes", map[string]any{"profile": "tuist-linux-small"}, &sb); code != 201 && code != 202 {
		t.Fatalf("create: %d", code)
	}
	// Provisioning queues behind other jobs on a loaded (or -race) run;
	// the budget is a hang detector, not a speed check.
	deadline := time.Now().Add(2 * time.Minute)
	for sb.Status != "ready" {
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s still %s", sb.ID, sb.Status)
		}
		time.Sleep(50 * time.Millisecond)
		s.call(t, "GET", "/api/v1/sandboxes/"+sb.ID, nil, &sb)
	}
	return sb.ID
}

// key mints an SSH credential for id and writes its private key.
func (s *stack) key(t *testing.T, id string) string {
	t.Helper()
	var tok struct {
		PrivateKeyPEM string `json:"private_key_pem"`
		Port          int    `json:"port"`
	}
	if code := s.call(t, "POST", "/api/v1/sandboxes/"+id+"/ssh_tokens", nil, &tok); code != 201 {
		t.Fatalf("ssh_tokens: %d", code)
	}
	if _, p, _ := net.SplitHostPort(s.edgeSSH); fmt.Sprint(tok.Port) != p {
		t.Fatalf("ssh_tokens names port %d, the edge listens on %s", tok.Port, p)
	}
	path := filepath.Join(s.dir, id+"-"+fmt.Sprint(time.Now().UnixNano()))
	if err := os.WriteFile(path, []byte(tok.PrivateKeyPEM), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func (s *stack) ssh(ctx context.Context, keyPath, user string, remote ...string) *exec.Cmd {
	host, port, _ := net.SplitHostPort(s.edgeSSH)
	args := []string{"-F", "/dev/null", "-o", "UserKnownHostsFile=" + filepath.Join(s.dir, "known_hosts"),
		"-o", "StrictHostKeyChecking=accept-new", "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
		"-i", keyPath, "-p", port, user + "@" + host}
	return exec.CommandContext(ctx, "ssh", append(args, remote...)...)
}

// TestEdgeAgainstControl runs the split deployment: SSH lands on cmd/edge,
// which asks control's internal API over HTTP and relays to the sandbox.
func TestEdgeAgainstControl(t *testing.T) {
	sshscenario.Require(t, "ssh", "openssh-client")
	s := startStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, b := s.readySandbox(t), s.readySandbox(t)
	keyA := s.key(t, a)

	var stdout, stderr bytes.Buffer
	cmd := s.ssh(ctx, keyA, a, "echo out-$((6*7)); echo err >&2; exit 3")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("ssh exit %v, want 3; stderr %s", err, stderr.String())
	}
	if stdout.String() != "out-42\n" || !strings.Contains(stderr.String(), "err") {
		t.Fatalf("stdout %q stderr %q", stdout.String(), stderr.String())
	}

	// A's key for B is refused by control, through the edge.
	out, err := s.ssh(ctx, keyA, b, "true").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Permission denied") {
		t.Fatalf("A's key for B: err %v, output %s; want Permission denied", err, out)
	}

	// A deleted sandbox's key is refused with the reason.
	if code := s.call(t, "DELETE", "/api/v1/sandboxes/"+a, nil, nil); code != 200 {
		t.Fatalf("delete: %d", code)
	}
	// The edge may hold the earlier yes in its cache; a failed upstream
	// dial drops it, so at most one more attempt is told "not reachable"
	// before control's answer (ended) comes through.
	deadline := time.Now().Add(time.Minute) // a hang detector, not a speed check
	for {
		out, err = s.ssh(ctx, keyA, a, "true").CombinedOutput()
		if err != nil && strings.Contains(string(out), "has ended") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deleted sandbox: err %v, output %s; want the 'has ended' refusal", err, out)
		}
		time.Sleep(500 * time.Millisecond)
	}

	// Metrics are on their own listener, not beside the health probes.
	if resp, err := http.Get("http://" + s.edgeHTTP + "/metrics"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /metrics on the health listener: %v %v, want 404", resp, err)
	} else {
		resp.Body.Close()
	}
	resp, err := http.Get("http://" + s.edgeMetric + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !regexp.MustCompile(`(?m)^sbx_sshbroker_handshakes_total\{result="ok"\} [1-9]`).Match(mb) {
		t.Errorf("edge metrics lack one successful handshake:\n%s", metrictest.Lines(string(mb), "sbx_sshbroker_handshakes"))
	}
}

func TestConfigFromFlagsAndEnv(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "secret")
	if err := os.WriteFile(secretFile, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"SBX_CONTROL_URL": "http://env:1", "SBX_INTERNAL_SECRET": "from-env",
		"SBX_EDGE_HOST_KEY_DIR": "/keys", "SBX_CA_KEY_FILE": "/ca", "SBX_REDIS_URL": "redis://env:6379/0"}
	getenv := func(k string) string { return env[k] }
	c, _, err := parseConfig([]string{"--control-url", "http://flag:1"}, getenv)
	if err != nil {
		t.Fatal(err)
	}
	if c.ControlURL != "http://flag:1" || c.InternalSecret != "from-env" || c.HostKeyDir != "/keys" || c.Drain != 30*time.Second || c.MetricsAddr != "127.0.0.1:9092" {
		t.Fatalf("config %+v", c)
	}
	if c.Preview.ReverseProxyOnly {
		t.Fatal("ReverseProxyOnly is on by default: the lean relay should carry plain HTTP/1.1")
	}
	env["SBX_PREVIEW_REVERSE_PROXY_ONLY"] = "1"
	if c, _, err = parseConfig(nil, getenv); err != nil || !c.Preview.ReverseProxyOnly {
		t.Fatalf("SBX_PREVIEW_REVERSE_PROXY_ONLY=1: ReverseProxyOnly %v, %v", c.Preview.ReverseProxyOnly, err)
	}
	delete(env, "SBX_PREVIEW_REVERSE_PROXY_ONLY")
	if c.Preview.SSHOnly {
		t.Fatal("SSHOnly is on by default: sandboxes with a port forwarder should be reached through it")
	}
	if c, _, err = parseConfig([]string{"--preview-ssh-only"}, getenv); err != nil || !c.Preview.SSHOnly {
		t.Fatalf("--preview-ssh-only: SSHOnly %v, %v", c.Preview.SSHOnly, err)
	}
	c, _, err = parseConfig([]string{"--internal-secret-file", secretFile}, getenv)
	if err != nil || c.InternalSecret != "from-file" {
		t.Fatalf("secret file: %q %v", c.InternalSecret, err)
	}
	_, _, err = parseConfig(nil, func(string) string { return "" })
	for _, want := range []string{"--control-url", "secret", "--host-key-dir", "--ca-key-file", "--redis-url", "--no-activity"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("empty config error %v, want it to name %s", err, want)
		}
	}
}

// TestConfigActivityOptOut: an edge without an activity store would let
// control suspend sandboxes busy through it, so it starts only with
// --redis-url or an explicit --no-activity.
func TestConfigActivityOptOut(t *testing.T) {
	t.Parallel()
	base := map[string]string{"SBX_CONTROL_URL": "http://c:1", "SBX_INTERNAL_SECRET": "s",
		"SBX_EDGE_HOST_KEY_DIR": "/keys", "SBX_CA_KEY_FILE": "/ca"}
	cases := []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr bool
		noAct   bool
	}{
		{"no redis, no opt-out", nil, nil, true, false},
		{"redis url", []string{"--redis-url", "redis://r:6379/0"}, nil, false, false},
		{"flag opt-out", []string{"--no-activity"}, nil, false, true},
		{"env opt-out", nil, map[string]string{"SBX_EDGE_NO_ACTIVITY": "1"}, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			getenv := func(k string) string {
				if v, ok := c.env[k]; ok {
					return v
				}
				return base[k]
			}
			cfg, _, err := parseConfig(c.args, getenv)
			if c.wantErr {
				if err == nil || !strings.Contains(err.Error(), "--no-activity") {
					t.Fatalf("parseConfig(%q): err %v, want one naming --no-activity", c.args, err)
				}
				return
			}
			if err != nil || cfg.NoActivity != c.noAct {
				t.Fatalf("parseConfig(%q): NoActivity %v err %v, want %v and no error", c.args, cfg.NoActivity, err, c.noAct)
			}
		})
	}
}
