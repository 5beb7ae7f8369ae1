package main

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control"
	"github.com/sbxedge/sbx/control/provider/k8s"
	"github.com/sbxedge/sbx/control/provider/k8s/k8stest"
	"github.com/sbxedge/sbx/internal/testkit/sshscenario"
)

// TestSSHAndPreviewThroughKubernetes runs control with the k8s provider (a real
// kube-apiserver, control under deploy/'s Role, and the test kubelet, whose
// pods run the real init, cmd/sbx-init, and sshd), the SSH broker and
// the preview proxy in one process, as sbx dev wires them, and drives a
// sandbox pod with the real OpenSSH client through the broker: a command
// writes a file and starts a loopback web server that curl reaches through
// the preview proxy, the sandbox is suspended to a VolumeSnapshot, and the
// next SSH connection wakes it with the file still there and the server
// gone. Then a Python dev server declared as a service with its port:
// after a suspend a browser's reload shows the waking page's steps, then
// the app, with no 502, and the service's logs show two starts; after
// another, an API client's request is held until the port answers.
func TestSSHAndPreviewThroughKubernetes(t *testing.T) {
	t.Parallel()
	sshBin := sshscenario.Require(t, "ssh", "openssh-client")
	kc := k8stest.NewCluster(t)
	// A hang detector for the flow, started once the cluster is up: its
	// apiserver took 2m25s to start under -race at load 40, which ended a
	// 2-minute context taken before it.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	kl := kc.Kubelet
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
				Namespace: kc.Namespace, Catalog: cat, SSHPort: kl.SSHPort(), ForwardPort: kl.ForwardPort(), WorkspaceDir: kl.WorkspaceDir(),
				PollInterval: 20 * time.Millisecond, ReplenishInterval: 100 * time.Millisecond,
			},
			Client: kc.Client, Dynamic: kc.Dynamic,
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
	// The API as the harness's clients speak it, here to the in-process
	// control.
	api := &devProc{t: t, API: svc.URL(), Token: tok, client: http.DefaultClient}
	var sb sbView
	if code := api.call("POST", "/api/v1/sandboxes", map[string]any{"profile": "tuist-linux-warm"}, &sb); code != 201 {
		t.Fatalf("create: %d", code)
	}
	// sshd starts a session in the user's home, which in a pod is the
	// image's /home/sandbox, off the workspace volume: what must survive
	// a suspend is written in the workspace.
	ws := "."
	if ready := api.waitStatus(sb.ID, "ready", 60*time.Second); ready.Workspace != nil {
		ws = *ready.Workspace
	}
	var cred sshToken
	if code := api.call("POST", "/api/v1/sandboxes/"+sb.ID+"/ssh_tokens", map[string]any{"ttl_minutes": 10}, &cred); code != 201 {
		t.Fatalf("ssh_tokens: %d", code)
	}
	ta := sshTarget{id: cred.Username, host: cred.Host, port: cred.Port, known: filepath.Join(dir, "known_hosts"),
		keyFile: writeKey(t, dir, "id_ed25519", []byte(cred.PrivateKeyPem))}
	ssh := func(command string) (stdout, stderr string) {
		t.Helper()
		out, errOut, code := runTool(t, "", sshBin, append(ta.opts("-p"), ta.dest(), "cd "+ws+" && "+command)...)
		if code != 0 {
			t.Fatalf("ssh %q: exit %d\n%s%s", command, code, out, errOut)
		}
		return out, errOut
	}
	if got, _ := ssh("echo through-k8s > note.txt && cat note.txt"); got != "through-k8s\n" {
		t.Errorf("ssh wrote and read %q; want through-k8s", got)
	}

	// A loopback-only web server in the pod, reached through the preview
	// proxy over the pod's sshd (direct-tcpip).
	sshscenario.Require(t, "python3", "python3")
	// Any free port but the pods' SSH port, which control rightly refuses
	// to expose (422), and their forwarder's. A pod's loopback is the
	// machine's here and the test kubelet binds those ports on the pod IPs
	// only, so 127.0.0.1 can hand them out (rarely, about once in 10,000
	// picks; a make race run drew it).
	webPort := 0
	for webPort == 0 || webPort == kl.SSHPort() || webPort == kl.ForwardPort() {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		webPort = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	ssh("mkdir -p site && echo from-the-pod > site/index.html && " +
		"{ setsid nohup python3 -m http.server --bind 127.0.0.1 --directory site " + strconv.Itoa(webPort) + " >/dev/null 2>&1 & }")
	var pv portView
	if code := api.call("POST", "/api/v1/sandboxes/"+sb.ID+"/ports", map[string]any{"port": webPort}, &pv); code != 201 {
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

	suspend := func() {
		t.Helper()
		if err := svc.Life.Suspend(ctx, sb.ID, "test"); err != nil {
			t.Fatal(err)
		}
		api.waitStatus(sb.ID, "suspended", 60*time.Second)
	}
	suspend()
	got, stderr := ssh("cat note.txt")
	if got != "through-k8s\n" {
		t.Errorf("after wake over SSH: %q; want the note kept in the snapshot", got)
	}
	if !strings.Contains(stderr, "waking sandbox") {
		t.Errorf("ssh stderr %q; want the broker's waking notice", stderr)
	}
	if api.call("GET", "/api/v1/sandboxes/"+sb.ID, nil, &sb); sb.Status != "ready" {
		t.Errorf("sandbox %s after SSH wake; want ready", sb.Status)
	}

	// The pod's init was PID 1 of the pod: the server a session left
	// running (setsid) ended with the suspended pod.
	if got, _ := ssh("pgrep -f 'http[.]server' || echo none"); strings.TrimSpace(got) != "none" {
		t.Errorf("a process of the suspended pod runs in its successor: %q", got)
	}

	// A dev server declared as a service with its port: the pod's init
	// runs it. After a suspend, a browser's reload gets the waking page,
	// step by step, then the app, never a 502; the service's logs, kept
	// in the workspace, show its start before and after.
	if code := api.call("PUT", "/api/v1/sandboxes/"+sb.ID+"/services/web", map[string]any{
		"command": "python3", "args": []string{"-c", devServerScript, strconv.Itoa(webPort)}, "port": webPort,
	}, nil); code != 200 {
		t.Fatalf("PUT service: %d", code)
	}
	api.waitService(sb.ID, "web", "running", func(s serviceView) bool { return s.State == "running" })
	suspend()
	docs := api.browserWake(pv.URL+"/", devServerApp)
	if first := docs[0]; first.code != 503 || first.step == "" || !strings.Contains(first.body, sb.ID) || !strings.Contains(first.body, strconv.Itoa(webPort)) {
		t.Errorf("first document %d (step %q): want the waking page naming %s and port %d:\n%s", first.code, first.step, sb.ID, webPort, first.body)
	}
	var trail []string
	for _, d := range docs {
		trail = append(trail, strconv.Itoa(d.code)+" "+d.step)
		if d.code != 503 && d.code != 200 {
			t.Errorf("document %d on the way from the waking page to the app", d.code)
		}
	}
	t.Logf("browser wake through the k8s provider: %s", strings.Join(trail, " -> "))
	if code, logs := api.rawGet("/api/v1/sandboxes/" + sb.ID + "/services/web/logs"); code != 200 ||
		strings.Count(logs, "sbx-init: starting web") != 2 || strings.Count(logs, "\ndev server listening on") != 2 {
		t.Errorf("service logs (%d) show %d starts, want 2:\n%s", code, strings.Count(logs, "sbx-init: starting web"), logs)
	}

	// After the next suspend an API client's request wakes the pod and is
	// held until the service's port answers.
	suspend()
	out, err := exec.CommandContext(ctx, "curl", "-sS", "--max-time", "60", "-w", "\n%{http_code}",
		"--connect-to", "::127.0.0.1:"+strconv.Itoa(previewPort), "-H", "Authorization: Bearer "+tok, pv.URL+"/").CombinedOutput()
	if err != nil || !strings.HasSuffix(string(out), "\n200") || !strings.Contains(string(out), devServerApp) {
		t.Fatalf("preview of the suspended pod: %q %v; want the service's page, held until its port answered", out, err)
	}
}
