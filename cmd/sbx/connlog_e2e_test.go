package main

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sbxedge/sbx/internal/testkit/chromiumtest"
)

// connRow is a row of GET …/connections as the tests read it.
type connRow struct {
	ID         string     `json:"id"`
	SandboxID  string     `json:"sandbox_id"`
	Kind       string     `json:"kind"`
	Live       bool       `json:"live"`
	Credential string     `json:"credential"`
	ClientAddr string     `json:"client_addr"`
	ClientKind string     `json:"client_kind"`
	Detail     string     `json:"client_detail"`
	Channels   []string   `json:"channels"`
	StartedAt  time.Time  `json:"started_at"`
	EndedAt    *time.Time `json:"ended_at"`
	BytesIn    int64      `json:"bytes_in"`
	BytesOut   int64      `json:"bytes_out"`
	EndReason  string     `json:"end_reason"`
}

func (p *devProc) connections(t *testing.T, path string) []connRow {
	t.Helper()
	var out struct {
		Connections []connRow `json:"connections"`
	}
	if code := p.call("GET", path, nil, &out); code != 200 {
		t.Fatalf("GET %s: %d", path, code)
	}
	return out.Connections
}

// waitConnections polls path until ok holds for its rows, or fails after
// limit.
func (p *devProc) waitConnections(t *testing.T, path string, limit time.Duration, ok func([]connRow) bool) []connRow {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		rows := p.connections(t, path)
		if ok(rows) {
			return rows
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: after %s still %+v", path, limit, rows)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestConnectionLogKnowsTheClient is issue 31's "must show" for the
// connection log's clients: plain OpenSSH, OpenSSH with the environment
// VS Code's Remote-SSH sends, the sbx CLI (sbx ssh) and Chromium on a
// preview each get their own client kind, with the channel kinds and
// bytes of what they did, credential and address; `sbx who` shows them.
func TestConnectionLogKnowsTheClient(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatal("python3 is required (apt-get install python3)")
	}
	dir := t.TempDir()
	p := startDev(t, filepath.Join(dir, "data"), "", "--conn-lease", "3s", "--conn-sweep", "250ms", "--preview-session-idle", "1s")
	id := createReady(t, p)
	ta := mint(t, p, id, dir)

	ssh := func(env []string, opts ...string) {
		t.Helper()
		cmd := exec.Command("ssh", append(append(ta.opts("-p"), opts...), ta.dest(), "echo hello-log")...)
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "hello-log") {
			t.Fatalf("ssh %v: %v %q", opts, err, out)
		}
	}
	ssh(nil)
	// What VS Code's Remote-SSH sets: VSCODE_* variables passed with
	// SendEnv and SetEnv.
	ssh([]string{"VSCODE_IPC_HOOK_CLI=/tmp/vscode-ipc.sock"}, "-o", "SendEnv=VSCODE_*",
		"-o", "SetEnv=VSCODE_AGENT_FOLDER=/home/sbx/.vscode-server")

	cliEnv := append(os.Environ(), "SBX_API="+p.API, "SBX_TOKEN="+p.Token, "SBX_DATA_DIR="+p.DataDir,
		"SBX_CONFIG_DIR="+filepath.Join(dir, "cli-config"), "TMPDIR="+t.TempDir())
	cli := exec.Command(sbxBinary(t), "ssh", id, "-F", "/dev/null", "-o", "BatchMode=yes", "echo via-cli")
	cli.Env = cliEnv
	if out, err := cli.CombinedOutput(); err != nil || !strings.Contains(string(out), "via-cli") {
		t.Fatalf("sbx ssh: %v %q", err, out)
	}

	// A public preview opened in Chromium.
	port, _ := strconv.Atoi(strings.Split(freeAddr(t), ":")[1])
	var ex execResult
	if code := p.call("POST", "/api/v1/sandboxes/"+id+"/exec", map[string]any{
		"command": "mkdir -p site && echo '<html><body><h1 id=\"msg\">logged</h1></body></html>' > site/index.html && " +
			"{ setsid nohup python3 -m http.server --bind 127.0.0.1 --directory site " + strconv.Itoa(port) + " >/dev/null 2>&1 & } && echo $!",
	}, &ex); code != 200 || ex.ExitCode != 0 {
		t.Fatalf("start dev server: %d %+v", code, ex)
	}
	if pid, err := strconv.Atoi(strings.TrimSpace(ex.Stdout)); err == nil {
		t.Cleanup(func() {
			if proc, err := os.FindProcess(pid); err == nil {
				_ = proc.Kill()
			}
		})
	}
	var pv portView
	if code := p.call("POST", "/api/v1/sandboxes/"+id+"/ports", map[string]any{"port": port, "access": "public"}, &pv); code != 201 {
		t.Fatalf("POST ports: %d", code)
	}
	ctx := chromiumtest.New(t, 90*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var text string
		err := chromedp.Do(ctx, chromedp.Navigate(pv.URL+"/index.html"))
		if err == nil {
			text, err = chromedp.Run(ctx, chromedp.Text("body"))
		}
		if err == nil && strings.Contains(text, "logged") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the preview never showed the page in Chromium: %v %q", err, text)
		}
		time.Sleep(300 * time.Millisecond)
	}

	path := "/api/v1/sandboxes/" + id + "/connections"
	find := func(rows []connRow, kind, client string) *connRow {
		for i := range rows {
			if rows[i].Kind == kind && rows[i].ClientKind == client && !rows[i].Live {
				return &rows[i]
			}
		}
		return nil
	}
	// Each SSH connection ends with its client; the browser session after
	// a second without requests.
	rows := p.waitConnections(t, path, 20*time.Second, func(rows []connRow) bool {
		return find(rows, "ssh", "openssh") != nil && find(rows, "ssh", "vscode") != nil &&
			find(rows, "ssh", "sbx") != nil && find(rows, "preview", "browser") != nil
	})
	for _, client := range []string{"openssh", "vscode", "sbx"} {
		c := find(rows, "ssh", client)
		if c.SandboxID != id || !strings.HasPrefix(c.Credential, "SHA256:") || !strings.HasPrefix(c.ClientAddr, "127.0.0.1:") ||
			len(c.Channels) != 1 || c.Channels[0] != "exec" || c.BytesOut == 0 || c.EndReason != "closed" || c.EndedAt == nil {
			t.Errorf("%s's SSH connection: %+v, want an exec channel, bytes out, a key fingerprint and closed", client, *c)
		}
	}
	if c := find(rows, "preview", "browser"); c.Credential != "public" || c.BytesOut == 0 {
		t.Errorf("browser's preview session: %+v", *c)
	}
	// Opening the page took several requests (and retries): one session.
	n := 0
	for _, r := range rows {
		if r.Kind == "preview" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d preview connections, want the browser's one session: %+v", n, rows)
	}

	// sbx who lists them; the account-wide live list is empty now.
	who := exec.Command(sbxBinary(t), "who", id, "--all")
	who.Env = cliEnv
	var out bytes.Buffer
	who.Stdout, who.Stderr = &out, &out
	if err := who.Run(); err != nil || !strings.Contains(out.String(), "vscode") || !strings.Contains(out.String(), "browser") {
		t.Errorf("sbx who --all: %v\n%s", err, out.String())
	}
	if live := p.connections(t, "/api/v1/connections?live=true"); len(live) != 0 {
		t.Errorf("live connections after everyone left: %+v", live)
	}
}

// TestConnectionLogSettlesAKilledEdge kills the process holding an SSH
// connection's edge with SIGKILL (sbx dev: control and the edge in one
// process, so no clean close can reach the log) and restarts control on
// the same database: the connection, live when the edge died, ends as
// edge_lost once its lease lapsed, with no edge ever saying so.
func TestConnectionLogSettlesAKilledEdge(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	flags := []string{"--conn-lease", "2s", "--conn-sweep", "250ms"}
	p := startDev(t, data, "", flags...)
	id := createReady(t, p)
	ta := mint(t, p, id, dir)
	hold := exec.Command("ssh", append(ta.opts("-p"), ta.dest(), "sleep 120")...)
	if err := hold.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hold.Process.Kill(); _ = hold.Wait() })
	path := "/api/v1/sandboxes/" + id + "/connections"
	live := p.waitConnections(t, path+"?live=true", 20*time.Second, func(rows []connRow) bool {
		return len(rows) == 1 && rows[0].Kind == "ssh" && rows[0].Live
	})[0]
	// The edge's gauge counts it, by kind and without a sandbox ID.
	resp, err := http.Get(p.Metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `sbx_connections_live{kind="ssh",source="edge"} 1`; !strings.Contains(string(metrics), want) {
		t.Errorf("metrics do not show %s", want)
	}
	for _, line := range strings.Split(string(metrics), "\n") {
		if strings.HasPrefix(line, "sbx_connections_live") && strings.Contains(line, id) {
			t.Errorf("a connection gauge names the sandbox: %s", line)
		}
	}

	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.waited
	killed := time.Now()
	p2 := startDev(t, data, "", flags...)
	rows := p2.waitConnections(t, path, 60*time.Second, func(rows []connRow) bool {
		for _, r := range rows {
			if r.ID == live.ID && !r.Live {
				return true
			}
		}
		return false
	})
	for _, r := range rows {
		if r.ID != live.ID {
			continue
		}
		if r.EndReason != "edge_lost" || r.EndedAt == nil || r.EndedAt.After(killed.Add(5*time.Second)) {
			t.Errorf("the killed edge's connection: %+v, want edge_lost at its lease (killed at %s)", r, killed.UTC())
		}
	}
	if got := p2.connections(t, "/api/v1/connections?live=true"); len(got) != 0 {
		t.Errorf("live after the lease: %+v", got)
	}
}
