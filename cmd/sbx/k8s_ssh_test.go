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
	"github.com/sbxedge/sbx/control/devseed"
	"github.com/sbxedge/sbx/control/provider/k8s"
	"github.com/sbxedge/sbx/control/provider/k8s/k8stest"
)

// TestSSHThroughKubernetes runs control with the k8s provider (client-go
// fakes and the test kubelet; no real API server runs) and the SSH broker
// in one process, as sbx dev wires them, and drives a sandbox pod with the
// real OpenSSH client through the broker: a command writes a file, the
// sandbox is suspended to a VolumeSnapshot, and the next SSH connection
// wakes it with the file still there.
func TestSSHThroughKubernetes(t *testing.T) {
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
	sshLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host, port, err := publicSSHAddr(sshLn.Addr())
	if err != nil {
		t.Fatal(err)
	}
	svc, err := control.Open(ctx, control.Config{
		DataDir: dir, APIAddr: "127.0.0.1:0", SSHHost: host, SSHPort: port,
		Kubernetes: &control.KubernetesConfig{
			Provider: k8s.Config{
				Namespace: ns, Catalog: cat, SSHPort: kl.SSHPort(), WorkspaceDir: kl.WorkspaceDir(),
				PollInterval: 20 * time.Millisecond, ReplenishInterval: 100 * time.Millisecond,
			},
			Client: client, Dynamic: dyn,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := devseed.Seed(ctx, svc.Store, "", filepath.Join(dir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := startBroker(svc, sshLn, dir, 2*time.Second, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := b.shutdown(sctx); err != nil {
			t.Errorf("broker shutdown: %v", err)
		}
		if err := svc.Shutdown(sctx); err != nil {
			t.Errorf("control shutdown: %v", err)
		}
	})
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
}
