package main

import (
	"bufio"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// streamServer is a dev server that answers every GET with a line a
// second for a minute: a long download, or server-sent events.
const streamServer = `import http.server, time
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
        for i in range(60):
            self.wfile.write(b"tick\n"); self.wfile.flush(); time.sleep(1)
http.server.ThreadingHTTPServer(("127.0.0.1", PORT), H).serve_forever()
`

// TestDevStopsDuringPreviewStream: SIGTERM while a preview response is
// streaming ends `sbx dev` cleanly (exit 0) once the drain period is
// over, the stream cut. It waited for the shutdown's outer deadline
// (drain + 5 s) and exited 1 saying only "sbx: interrupted": the preview
// server's drain ran out that deadline and reported it as an error.
func TestDevStopsDuringPreviewStream(t *testing.T) {
	const drain = 2 * time.Second
	p := startDev(t, t.TempDir(), "", "--ssh-drain", drain.String())
	id := createReady(t, p)

	port := strings.Split(freeAddr(t), ":")[1]
	var ex execResult
	code := p.call("POST", "/api/v1/sandboxes/"+id+"/exec", map[string]any{
		"command": "cat > stream.py <<'EOF'\n" + strings.ReplaceAll(streamServer, "PORT", port) + "EOF\n" +
			"{ setsid nohup python3 stream.py >/dev/null 2>&1 & } && echo $!",
	}, &ex)
	if code != 200 || ex.ExitCode != 0 {
		t.Fatalf("start stream server: %d %+v", code, ex)
	}
	if pid, err := strconv.Atoi(strings.TrimSpace(ex.Stdout)); err == nil {
		t.Cleanup(func() { killProcess(pid) })
	}
	var pv portView
	n, _ := strconv.Atoi(port)
	if code := p.call("POST", "/api/v1/sandboxes/"+id+"/ports", map[string]any{"port": n}, &pv); code != 201 {
		t.Fatalf("POST ports: %d", code)
	}
	u, err := url.Parse(pv.URL)
	if err != nil {
		t.Fatal(err)
	}

	// A streaming GET, retried until the server listens (502 until then).
	var curl *exec.Cmd
	var lines *bufio.Scanner
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		curl = exec.Command("curl", "-sN", "-f", "--connect-to", "::127.0.0.1:"+u.Port(),
			"-H", "Authorization: Bearer "+p.Token, pv.URL+"/")
		out, err := curl.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := curl.Start(); err != nil {
			t.Fatal(err)
		}
		lines = bufio.NewScanner(out)
		if lines.Scan() && lines.Text() == "tick" {
			break
		}
		_ = curl.Wait()
		if time.Now().After(end) {
			t.Fatal("the preview never streamed")
		}
	}
	t.Cleanup(func() { _ = curl.Process.Kill(); _ = curl.Wait() })

	start := time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	var exitErr error
	select {
	case exitErr = <-p.waited:
	case <-time.After(40 * time.Second):
		t.Fatal("sbx dev did not stop within 40s of SIGTERM")
	}
	took := time.Since(start)
	if exitErr != nil {
		t.Errorf("sbx dev exited with %v after SIGTERM during a preview stream (after %v), want 0", exitErr, took)
	}
	p.log.mu.Lock()
	out := p.log.String()
	p.log.mu.Unlock()
	if strings.Contains(out, "sbx: interrupted") {
		t.Errorf("sbx dev said %q on a plain stop", "sbx: interrupted")
	}
	for lines.Scan() { // the stream ends: cut, not left open
	}
}
