package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestServicesSSHDWithoutInitBinary: `sbx dev --sandbox-server sshd`
// with no sbx-init beside sbx and none on PATH (as under go run) still
// runs a sandbox's services: sshd runs sbx itself, as "sbx sandbox-init
// ctl", for the init's subsystem. A declared service reads running and
// its port answers.
func TestServicesSSHDWithoutInitBinary(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/usr/sbin/sshd"); err != nil {
		t.Fatal("no /usr/sbin/sshd: install openssh-server (.ci/run does)")
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatal("python3 is required (apt-get install python3)")
	}
	bin := sbxBinary(t)
	if _, err := os.Stat(filepath.Join(filepath.Dir(bin), "sbx-init")); err == nil {
		t.Fatal("an sbx-init lies beside the test's sbx binary")
	}
	// PATH without any directory holding an sbx-init.
	var path []string
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if _, err := os.Stat(filepath.Join(d, "sbx-init")); err != nil {
			path = append(path, d)
		}
	}
	env := []string{"PATH=" + strings.Join(path, string(os.PathListSeparator)), "SBX_SANDBOX_INIT="}
	cmd := exec.Command("sh", "-c", "command -v sbx-init")
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.Output(); err == nil {
		t.Fatalf("sbx-init still on the test's PATH: %s", out)
	}

	p := startDevEnv(t, env, filepath.Join(t.TempDir(), "data"), "", "--sandbox-server", "sshd")
	id := createReady(t, p)
	// The sandbox's sshd names sbx itself for the init's subsystem.
	conf, err := os.ReadFile(filepath.Join(p.DataDir, "sandboxes", id, "sshd_config"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "Subsystem sbx-init " + bin + " sandbox-init ctl --socket "; !strings.Contains(string(conf), want) {
		t.Fatalf("sshd_config does not hold %q:\n%s", want, conf)
	}

	port, _ := strconv.Atoi(strings.Split(freeAddr(t), ":")[1])
	if code := p.call("PUT", "/api/v1/sandboxes/"+id+"/services/web", map[string]any{
		"command": "python3", "args": []string{"-m", "http.server", strconv.Itoa(port), "--bind", "127.0.0.1"}, "port": port,
	}, nil); code != 200 {
		t.Fatalf("PUT service web: %d", code)
	}
	web := p.waitService(id, "web", "running", func(s serviceView) bool { return s.State == "running" })
	if web.Starts != 1 {
		t.Errorf("web = %+v, want one start", web)
	}
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 5*time.Second)
	if err != nil {
		t.Fatalf("web's port: %v, want it to answer", err)
	}
	c.Close()
	code, logs := p.rawGet("/api/v1/sandboxes/" + id + "/services/web/logs")
	if code != 200 || !strings.Contains(logs, "sbx-init: starting web") {
		t.Errorf("service logs (%d): %q, want the start", code, logs)
	}
	p.stop()
	// Stopping sbx dev ends the service with the sandbox's server.
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(end) {
			t.Fatal("web's port still answers 10s after sbx dev stopped")
		}
	}
}
