package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control"
	"github.com/sbxedge/sbx/control/provider/k8s"
	"github.com/sbxedge/sbx/control/provider/k8s/k8stest"
)

// TestSSHAndPreviewThroughKubernetes runs control with the k8s provider (client-go
// fakes and the test kubelet; no real API server runs), the SSH broker and
// the preview proxy in one process, as sbx dev wires them, and drives a
// sandbox pod with the real OpenSSH client through the broker: a command
// writes a file and starts a loopback web server that curl reaches through
// the preview proxy, the sandbox is suspended to a VolumeSnapshot, and the
// next SSH connection wakes it with the file still there.
func TestSSHAndPreviewThroughKubernetes(t *testing.T) {
	t.Parallel()
	sshBin, err := exec.LookPath("ssh")
	if err != nil {
		t.Fatalf("OpenSSH client required (apt-get install openssh-client): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns = "sandboxes"
	client, dyn := k8stest.Clients()
	kl := k8stest.Start(t, client, dyn, ns)
	cat, err := k8s.LoadCatalog(filepath.Join("..", "..", "control", "provider", "k8s", "testdata", "catalog.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	d, err := startDevStack(ctx, devConfig{
		DataDir: dir, APIAddr: "127.0.0.1:0", SSHAddr: "127.0.0.1:0", PreviewAddr: "127.0.0.1:0",
		PreviewDomain: "preview.localhost", SSHDrain: 2 * time.Second,
	}, slog.New(slog.DiscardHandler), func(c *control.Config) {
		c.Provider = k8stest.Opener{
			Config: k8s.Config{
				Namespace: ns, Catalog: cat, SSHPort: kl.SSHPort(), WorkspaceDir: kl.WorkspaceDir(),
				PollInterval: 20 * time.Millisecond, ReplenishInterval: 100 * time.Millisecond,
			},
			Client: client, Dynamic: dyn,
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.shutdown(); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	svc, tok, previewPort := d.svc, d.token, d.edge.PreviewAddr().(*net.TCPAddr).Port
	call := func(method, path, body string, out any) int {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, svc.URL()+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if out != nil {
			if err := json.Unmarshal(raw, out); err != nil {
				t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, raw)
			}
		}
		return resp.StatusCode
	}
	status := func(id string) string {
		var sb struct {
			Status string `json:"status"`
		}
		call("GET", "/api/v1/sandboxes/"+id, "", &sb)
		return sb.Status
	}
	waitStatus := func(id, want string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for status(id) != want {
			if time.Now().After(deadline) {
				t.Fatalf("sandbox %s is %s; want %s", id, status(id), want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	var sb struct {
		ID string `json:"id"`
	}
	if code := call("POST", "/api/v1/sandboxes", `{"profile":"tuist-linux-warm"}`, &sb); code != 201 {
		t.Fatalf("create: %d", code)
	}
	waitStatus(sb.ID, "ready")
	var cred struct {
		Username      string `json:"username"`
		Host          string `json:"host"`
		Port          int    `json:"port"`
		PrivateKeyPEM string `json:"private_key_pem"`
	}
	if code := call("POST", "/api/v1/sandboxes/"+sb.ID+"/ssh_tokens", `{"ttl_minutes":10}`, &cred); code != 201 {
		t.Fatalf("ssh_tokens: %d", code)
	}
	keyFile := filepath.Join(dir, "id_ed25519")
	if err := os.WriteFile(keyFile, []byte(cred.PrivateKeyPEM), 0o600); err != nil {
		t.Fatal(err)
	}
	ssh := func(command string) (stdout, stderr string) {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(cctx, sshBin, "-F", "/dev/null", "-i", keyFile, "-o", "IdentitiesOnly=yes",
			"-o", "UserKnownHostsFile="+filepath.Join(dir, "known_hosts"), "-o", "StrictHostKeyChecking=accept-new",
			"-o", "BatchMode=yes", "-p", strconv.Itoa(cred.Port), cred.Username+"@"+cred.Host, command)
		var errBuf strings.Builder
		cmd.Stderr = &errBuf
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("ssh %q: %v\n%s%s", command, err, out, errBuf.String())
		}
		return string(out), errBuf.String()
	}
	if got, _ := ssh("echo through-k8s > note.txt && cat note.txt"); got != "through-k8s\n" {
		t.Errorf("ssh wrote and read %q; want through-k8s", got)
	}

	// A loopback-only web server in the pod, reached through the preview
	// proxy over the pod's sshd (direct-tcpip).
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatal("python3 is required (apt-get install python3)")
	}
	webPort := previewPort + 1 // any port: it is bound inside the sandbox's loopback
	if l, err := net.Listen("tcp", "127.0.0.1:0"); err == nil {
		webPort = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	pidOut, _ := ssh("mkdir -p site && echo from-the-pod > site/index.html && " +
		"{ setsid nohup python3 -m http.server --bind 127.0.0.1 --directory site " + strconv.Itoa(webPort) + " >/dev/null 2>&1 & } && echo $!")
	killWeb := func() {}
	if pid, err := strconv.Atoi(strings.TrimSpace(pidOut)); err == nil {
		killWeb = func() { killProcess(pid) }
		t.Cleanup(killWeb)
	}
	var pv struct {
		URL string `json:"url"`
	}
	if code := call("POST", "/api/v1/sandboxes/"+sb.ID+"/ports", `{"port":`+strconv.Itoa(webPort)+`}`, &pv); code != 201 {
		t.Fatalf("POST ports: %d", code)
	}
	curlDeadline := time.Now().Add(20 * time.Second)
	for {
		out, err := exec.CommandContext(ctx, "curl", "-sS", "--max-time", "10",
			"--connect-to", "::127.0.0.1:"+strconv.Itoa(previewPort),
			"-H", "Authorization: Bearer "+tok, pv.URL+"/").CombinedOutput()
		if err == nil && string(out) == "from-the-pod\n" {
			break
		}
		if time.Now().After(curlDeadline) {
			t.Fatalf("preview %s: %q, %v; want from-the-pod", pv.URL, out, err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	if err := svc.Life.Suspend(ctx, sb.ID, "test"); err != nil {
		t.Fatal(err)
	}
	waitStatus(sb.ID, "suspended")
	got, stderr := ssh("cat note.txt")
	if got != "through-k8s\n" {
		t.Errorf("after wake over SSH: %q; want the note kept in the snapshot", got)
	}
	if !strings.Contains(stderr, "waking sandbox") {
		t.Errorf("ssh stderr %q; want the broker's waking notice", stderr)
	}
	if got := status(sb.ID); got != "ready" {
		t.Errorf("sandbox %s after SSH wake; want ready", got)
	}

	// The web server as a declared service: the pod's init runs it, and
	// after the next suspend an API client's preview request wakes the
	// pod and is held until the service's port answers.
	killWeb() // a pod release would have ended it; setsid escaped the test kubelet's sessions
	if code := call("PUT", "/api/v1/sandboxes/"+sb.ID+"/services/web", `{"command":"python3","args":["-m","http.server","--bind","127.0.0.1","--directory","site","`+
		strconv.Itoa(webPort)+`"],"port":`+strconv.Itoa(webPort)+`}`, nil); code != 200 {
		t.Fatalf("PUT service: %d", code)
	}
	if err := svc.Life.Suspend(ctx, sb.ID, "test"); err != nil {
		t.Fatal(err)
	}
	waitStatus(sb.ID, "suspended")
	out, err := exec.CommandContext(ctx, "curl", "-sS", "--max-time", "60", "-w", "\n%{http_code}",
		"--connect-to", "::127.0.0.1:"+strconv.Itoa(previewPort), "-H", "Authorization: Bearer "+tok, pv.URL+"/").CombinedOutput()
	if err != nil || string(out) != "from-the-pod\n\n200" {
		t.Fatalf("preview of the suspended pod: %q %v; want the service's page, held until its port answered", out, err)
	}
}
