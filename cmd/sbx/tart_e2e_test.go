package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/devseed"
)

var (
	fakeTartOnce sync.Once
	fakeTartPath string
	fakeTartErr  error
)

// fakeTartBinary builds internal/testkit/faketart (what `make faketart` puts in
// bin/tart) once, beside the sbx binary.
func fakeTartBinary(t *testing.T) string {
	t.Helper()
	fakeTartOnce.Do(func() {
		fakeTartPath = filepath.Join(filepath.Dir(sbxBinary(t)), "tart")
		if out, err := exec.Command("go", "build", "-o", fakeTartPath, "github.com/sbxedge/sbx/internal/testkit/faketart").CombinedOutput(); err != nil {
			fakeTartErr = err
			t.Logf("%s", out)
			return
		}
		// The host's macOS version, read beside tart (make faketart's link).
		if err := os.Symlink("tart", filepath.Join(filepath.Dir(fakeTartPath), "sw_vers")); err != nil && !os.IsExist(err) {
			fakeTartErr = err
		}
	})
	if fakeTartErr != nil {
		t.Fatal(fakeTartErr)
	}
	return fakeTartPath
}

// tartVMs is `tart list --format json` of the fake under env.
func tartVMs(t *testing.T, tartBin string, env []string) []struct {
	Name    string
	Running bool
} {
	t.Helper()
	cmd := exec.Command(tartBin, "list", "--format", "json")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tart list: %v", err)
	}
	var vms []struct {
		Name    string
		Running bool
	}
	if err := json.Unmarshal(out, &vms); err != nil {
		t.Fatal(err)
	}
	return vms
}

// fakeTartEnv is the fake's environment for a test: its VMs under dir,
// short delays, and bundles a thousandth of the memory setting. VMs a
// failing test leaves running are stopped when it ends.
func fakeTartEnv(t *testing.T, tartBin, dir string) []string {
	t.Helper()
	env := []string{
		"TART_HOME=" + filepath.Join(dir, "tart"), "FAKETART_PULL_DELAY=200ms", "FAKETART_CLONE_DELAY=100ms",
		"FAKETART_BOOT_DELAY=1s", "FAKETART_STATE_SCALE=0.001",
	}
	t.Cleanup(func() {
		for _, vm := range tartVMs(t, tartBin, env) {
			if vm.Running {
				cmd := exec.Command(tartBin, "stop", vm.Name)
				cmd.Env = append(os.Environ(), env...)
				_ = cmd.Run()
			}
		}
	})
	return env
}

func hasProfile(t *testing.T, p *devProc, name string) bool {
	t.Helper()
	var out struct {
		Profiles []struct {
			Name string `json:"name"`
		} `json:"profiles"`
	}
	if code := p.call("GET", "/api/v1/profiles", nil, &out); code != 200 {
		t.Fatalf("GET profiles: %d", code)
	}
	for _, pr := range out.Profiles {
		if pr.Name == name {
			return true
		}
	}
	return false
}

// TestMacOSOnTartThroughDev: `sbx dev --tart` on the fake tart is a
// one-host macOS pool. Two macOS sandboxes share one template build;
// exec, files, OpenSSH and a preview reach the guest; a third create
// waits with the slot message and becomes ready when one of the first
// two is destroyed; and without --tart the macOS profile is gone.
func TestMacOSOnTartThroughDev(t *testing.T) {
	tartBin := fakeTartBinary(t)
	dir := t.TempDir()
	env := fakeTartEnv(t, tartBin, dir)
	data := filepath.Join(dir, "data")
	p := startDevEnv(t, env, data, "", "--tart", tartBin)
	profile := devseed.MacOSProfiles[0].Name
	if !hasProfile(t, p, profile) {
		t.Fatalf("GET /api/v1/profiles lacks %s with --tart", profile)
	}

	create := func() string {
		var sb sbView
		if code := p.call("POST", "/api/v1/sandboxes", map[string]any{"profile": profile}, &sb); code != 201 {
			t.Fatalf("create %s: status %d", profile, code)
		}
		return sb.ID
	}
	a, b := create(), create()
	p.waitStatus(a, "ready", 2*time.Minute)
	p.waitStatus(b, "ready", 2*time.Minute)
	var templates []string
	for _, vm := range tartVMs(t, tartBin, env) {
		if strings.HasPrefix(vm.Name, "sbxtpl-") {
			templates = append(templates, vm.Name)
		}
	}
	if len(templates) != 1 || strings.HasSuffix(templates[0], "-build") {
		t.Fatalf("templates after two creates of one profile: %v; want one, built once", templates)
	}

	t.Run("exec", func(t *testing.T) {
		var ex execResult
		if code := p.call("POST", "/api/v1/sandboxes/"+a+"/exec", map[string]any{"command": "pwd; echo $HOME"}, &ex); code != 200 || ex.ExitCode != 0 {
			t.Fatalf("exec: %d %+v", code, ex)
		}
		if lines := strings.Split(strings.TrimSpace(ex.Stdout), "\n"); len(lines) != 2 || lines[0] != lines[1] || !strings.HasSuffix(lines[0], "/Users/admin") {
			t.Fatalf("exec ran in %q; want the guest user's home, the workspace", ex.Stdout)
		}
	})
	t.Run("files", func(t *testing.T) {
		u := p.API + "/api/v1/sandboxes/" + a + "/files/notes/hello.txt"
		req, _ := http.NewRequest("PUT", u, strings.NewReader("hello from the host\n"))
		req.Header.Set("Authorization", "Bearer "+p.Token)
		resp, err := p.client.Do(req)
		if err != nil || resp.StatusCode != 201 {
			t.Fatalf("PUT file: %v %v", resp, err)
		}
		resp.Body.Close()
		req, _ = http.NewRequest("GET", u, nil)
		req.Header.Set("Authorization", "Bearer "+p.Token)
		resp, err = p.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "hello from the host\n" {
			t.Fatalf("GET file: %d %q", resp.StatusCode, body)
		}
	})
	t.Run("openssh", func(t *testing.T) {
		ta := mint(t, p, a, dir)
		out, errOut, code := runTool(t, "", "ssh", append(ta.opts("-p"), ta.dest(), `cat "$HOME/notes/hello.txt"; exit 7`)...)
		if out != "hello from the host\n" || code != 7 {
			t.Fatalf("ssh: stdout %q stderr %q exit %d", out, errOut, code)
		}
	})
	t.Run("preview", func(t *testing.T) {
		if _, err := exec.LookPath("python3"); err != nil {
			t.Fatal("python3 is required (apt-get install python3)")
		}
		port, _ := strconv.Atoi(strings.Split(freeAddr(t), ":")[1])
		var ex execResult
		code := p.call("POST", "/api/v1/sandboxes/"+a+"/exec", map[string]any{
			"command": "mkdir -p site && echo 'served from a macOS guest' > site/index.html && " +
				"{ setsid nohup python3 -m http.server --bind 127.0.0.1 --directory site " + strconv.Itoa(port) + " >/dev/null 2>&1 & }",
		}, &ex)
		if code != 200 || ex.ExitCode != 0 {
			t.Fatalf("start server: %d %+v", code, ex)
		}
		var pv portView
		if code := p.call("POST", "/api/v1/sandboxes/"+a+"/ports", map[string]any{"port": port}, &pv); code != 201 {
			t.Fatalf("POST ports: %d", code)
		}
		u, err := url.Parse(pv.URL)
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			out, err := exec.Command("curl", "-sS", "--max-time", "5", "--connect-to", "::127.0.0.1:"+u.Port(),
				"-H", "Authorization: Bearer "+p.Token, pv.URL+"/").CombinedOutput()
			if err == nil && bytes.Contains(out, []byte("served from a macOS guest")) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("preview: %q %v", out, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})

	t.Run("third create waits for a slot", func(t *testing.T) {
		c := create()
		want := "waiting for a macOS slot (2 of 2 in use on 1 host)"
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(p.cli("events", c), want) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q event; events:\n%s", want, p.cli("events", c))
			}
			time.Sleep(200 * time.Millisecond)
		}
		if sb := p.waitStatus(c, "pending", time.Second); sb.Status != "pending" {
			t.Fatalf("third create is %s while both slots are taken", sb.Status)
		}
		running := 0
		for _, vm := range tartVMs(t, tartBin, env) {
			if vm.Running {
				running++
			}
		}
		if running != 2 {
			t.Fatalf("%d VMs running; want the two slots' worth", running)
		}
		if code := p.call("DELETE", "/api/v1/sandboxes/"+b, nil, nil); code != 202 && code != 200 && code != 204 {
			t.Fatalf("destroy %s: %d", b, code)
		}
		p.waitStatus(c, "ready", 2*time.Minute)
		if code := p.call("DELETE", "/api/v1/sandboxes/"+c, nil, nil); code >= 300 {
			t.Fatalf("destroy %s: %d", c, code)
		}
	})
	if code := p.call("DELETE", "/api/v1/sandboxes/"+a, nil, nil); code >= 300 {
		t.Fatalf("destroy %s: %d", a, code)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		left := 0
		for _, vm := range tartVMs(t, tartBin, env) {
			if strings.HasPrefix(vm.Name, "sbx-") {
				left++
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sandbox VMs left after destroy", left)
		}
		time.Sleep(200 * time.Millisecond)
	}
	p.stop()

	// Without --tart the same data dir offers no macOS profile and
	// refuses one.
	p = startDevEnv(t, env, data, "", "--tart", "")
	if hasProfile(t, p, profile) {
		t.Fatalf("GET /api/v1/profiles offers %s without --tart", profile)
	}
	if code := p.call("POST", "/api/v1/sandboxes", map[string]any{"profile": profile}, nil); code != 422 {
		t.Fatalf("create %s without --tart: %d, want 422", profile, code)
	}
	p.stop()
}
