package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control"
	"github.com/sbxedge/sbx/control/devseed"
	"github.com/sbxedge/sbx/control/provider/tart/agent"
	"github.com/sbxedge/sbx/control/standalone"
	"github.com/sbxedge/sbx/internal/testkit/servicetest"
	"github.com/sbxedge/sbx/internal/testkit/testdb"
)

var (
	toolsOnce sync.Once
	toolsDir  string
	toolsErr  error
)

// tools builds the fake tart (with its sw_vers) and sbx-macd once.
func tools(t *testing.T) string {
	t.Helper()
	toolsOnce.Do(func() {
		toolsDir, toolsErr = os.MkdirTemp("", "cmdcontrol-macos-")
		if toolsErr != nil {
			return
		}
		for pkg, name := range map[string]string{"github.com/sbxedge/sbx/internal/testkit/faketart": "tart", "github.com/sbxedge/sbx/cmd/sbx-macd": "sbx-macd"} {
			if out, err := exec.Command("go", "build", "-o", filepath.Join(toolsDir, name), pkg).CombinedOutput(); err != nil {
				toolsErr = err
				t.Logf("%s", out)
				return
			}
		}
		toolsErr = os.Symlink("tart", filepath.Join(toolsDir, "sw_vers"))
	})
	if toolsErr != nil {
		t.Fatal(toolsErr)
	}
	return toolsDir
}

// startMacd runs a host agent over the fake tart as its own process and
// returns its URL; its VMs are stopped before it goes.
func startMacd(t *testing.T, token string) string {
	t.Helper()
	dir := tools(t)
	cmd := exec.Command(filepath.Join(dir, "sbx-macd"), "--listen", "127.0.0.1:0", "--tart", filepath.Join(dir, "tart"), "--min-free-gb", "0")
	cmd.Env = append(os.Environ(), "SBX_MACD_TOKEN="+token, "TART_HOME="+t.TempDir(),
		"FAKETART_PULL_DELAY=50ms", "FAKETART_CLONE_DELAY=20ms", "FAKETART_BOOT_DELAY=300ms", "FAKETART_STATE_SCALE=0.001")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if err != nil || !ok {
		t.Fatalf("sbx-macd said %q, %v", line, err)
	}
	url := "http://" + addr
	t.Cleanup(func() {
		c := &agent.Client{BaseURL: url, Token: token}
		vms, _ := c.List(context.Background())
		for _, vm := range vms {
			if vm.Running {
				_ = c.Stop(context.Background(), vm.Name)
			}
		}
	})
	return url
}

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestMacOSHostsFlags: a bad hosts file stops the start with the flag
// and the field named; object storage is the agents' (sbx-macd
// --s3-endpoint), not a flag of control.
func TestMacOSHostsFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := writeFile(t, dir, "hosts.yaml", "hosts:\n  - name: mini-1\n    agent: https://mini-1.lan:7443\n    tokenFile: token\n")
	writeFile(t, dir, "token", "agent-token-0123456789abcdef\n")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"missing file", []string{"--macos-hosts", filepath.Join(dir, "nope.yaml")}, "--macos-hosts: open"},
		{"inline token", []string{"--macos-hosts", writeFile(t, dir, "inline.yaml", "hosts:\n  - name: mini-1\n    agent: https://mini-1.lan:7443\n    token: abc\n")}, "tokenFile"},
		{"third slot", []string{"--macos-hosts", writeFile(t, dir, "slots.yaml", "hosts:\n  - name: mini-1\n    agent: https://m:7443\n    slots: 3\n")}, "hosts[0].slots 3: Apple's licence allows 1 to 2"},
		{"typo", []string{"--macos-hosts", writeFile(t, dir, "typo.yaml", "hosts:\n  - name: mini-1\n    agnet: https://m:7443\n")}, `unknown field "agnet"`},
		{"no scheme", []string{"--macos-hosts", writeFile(t, dir, "url.yaml", "hosts:\n  - name: mini-1\n    agent: mini-1:7443\n")}, "hosts[0].agent"},
		{"twice", []string{"--macos-hosts", writeFile(t, dir, "twice.yaml", "hosts:\n  - {name: a, agent: 'https://a:1'}\n  - {name: a, agent: 'https://b:1'}\n")}, "listed twice"},
		{"s3 is the agents'", []string{"--macos-hosts", good, "--s3-endpoint", "http://127.0.0.1:9000"}, "-s3-endpoint (object storage for suspended macOS sandboxes is set on each Mac's host agent: sbx-macd --s3-endpoint"},
	} {
		if _, _, err := parseConfig(append(required(t), tc.args...), secretEnv); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error containing %q", tc.name, err, tc.want)
		}
	}
	c, _, err := parseConfig(append(required(t), "--macos-hosts", good), secretEnv)
	if err != nil {
		t.Fatal(err)
	}
	w, ok := c.Provider.(*withMacOS)
	if !ok || w.hosts.Hosts[0].Slots != 2 {
		t.Fatalf("provider %#v; want k8s with the hosts file's Mac (2 slots)", c.Provider)
	}
	if _, ok := w.def.(*kubernetes); !ok {
		t.Errorf("default provider %T; want k8s beside the Macs", w.def)
	}
}

// TestMacOSHostsWiring runs a replica (real Postgres and Redis) whose
// --macos-hosts names one Mac: a host agent in its own process over the
// fake tart, reached with control's internal-API token. Two creates of a
// macOS profile become ready on it; a third waits with the slot message
// while the Mac's 2 of 2 slots are in use, and is placed when one goes.
// Linux sandboxes stay on the default provider (the local one here: the
// test has no cluster).
func TestMacOSHostsWiring(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the agent and boots VMs")
	}
	dir := t.TempDir()
	url := startMacd(t, secret)
	profile := devseed.MacOSProfiles[0].Name
	hostsFile := writeFile(t, dir, "hosts.yaml", "hosts:\n  - name: mini-1\n    agent: "+url+"\n"+
		"templates:\n  "+profile+":\n    baseImage: ghcr.io/cirruslabs/macos-sequoia-base:latest\n    setupScript: |\n      mkdir -p \"$HOME/workspace\"\n")
	cfg, _, err := parseConfig([]string{
		"--data-dir", t.TempDir(), "--database-url", testdb.Postgres(t), "--redis-url", "redis://127.0.0.1:6379/0",
		"--activity-prefix", "sbxtest:cmdcontrol:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":", "--k8s-catalog", catalog,
		"--api-addr", "127.0.0.1:0", "--internal-addr", "127.0.0.1:0", "--metrics-addr", "",
		"--ssh-public-addr", "127.0.0.1:2222", "--no-idle-offload", "--macos-hosts", hostsFile,
	}, secretEnv)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Provider.(*withMacOS).def = standalone.Local{}
	ctx, cancel := context.WithCancel(context.Background())
	svc, done := servicetest.Start(t, "control", func(ready func(*control.Service)) error { return run(ctx, cfg, ready) })
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	tok, _, err := devseed.Seed(ctx, svc.Store, "", filepath.Join(dir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	if err := devseed.SeedProfiles(ctx, svc.Store, devseed.MacOSProfiles); err != nil {
		t.Fatal(err)
	}
	call := func(method, path string, body, out any) int {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, svc.URL()+path, rd)
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if out != nil {
			if err := json.Unmarshal(b, out); err != nil {
				t.Fatalf("%s %s: %d %q", method, path, resp.StatusCode, b)
			}
		}
		return resp.StatusCode
	}
	type sb struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	create := func() string {
		var s sb
		if code := call("POST", "/api/v1/sandboxes", map[string]any{"profile": profile}, &s); code != 201 {
			t.Fatalf("create %s: %d", profile, code)
		}
		return s.ID
	}
	waitFor := func(what string, limit time.Duration, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(limit); !ok(); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no %s after %s", what, limit)
			}
		}
	}
	status := func(id string) string {
		var s sb
		call("GET", "/api/v1/sandboxes/"+id, nil, &s)
		return s.Status
	}
	a, b := create(), create()
	for _, id := range []string{a, b} {
		waitFor(id+" ready", 2*time.Minute, func() bool { return status(id) == "ready" })
	}
	c := create()
	want := "waiting for a macOS slot (2 of 2 in use on 1 host)"
	waitFor("slot event", 30*time.Second, func() bool {
		var ev struct {
			Events []json.RawMessage `json:"events"`
		}
		call("GET", "/api/v1/sandboxes/"+c+"/events", nil, &ev)
		for _, e := range ev.Events {
			if strings.Contains(string(e), want) {
				return true
			}
		}
		return false
	})
	if s := status(c); s != "pending" {
		t.Fatalf("third create is %s while both slots are in use", s)
	}
	if code := call("DELETE", "/api/v1/sandboxes/"+b, nil, nil); code >= 300 {
		t.Fatalf("delete %s: %d", b, code)
	}
	waitFor(c+" ready after a slot freed", 2*time.Minute, func() bool { return status(c) == "ready" })
	vms, err := (&agent.Client{BaseURL: url, Token: secret}).List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, vm := range vms {
		names = append(names, vm.Name)
	}
	if !strings.Contains(strings.Join(names, " "), "sbx-"+c) {
		t.Errorf("VMs on the Mac: %v; want %s's", names, c)
	}
	for _, id := range []string{a, c} {
		call("DELETE", "/api/v1/sandboxes/"+id, nil, nil)
	}
}
