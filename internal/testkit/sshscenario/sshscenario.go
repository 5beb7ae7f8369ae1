// Package sshscenario is the real-OpenSSH scenarios the SSH broker must
// pass, written once and run by the broker's own tests (edge/sshbroker,
// against sshd) and by the end-to-end tests through `sbx dev`
// (cmd/sbx, embedded server and sshd), so "the same suite" is the same
// code. Every scenario drives the system ssh, scp or curl binaries.
//
// The local provider's sandboxes and the test sshd run on this machine,
// so "a server inside the sandbox" is a loopback listener here.
package sshscenario

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// SSH builds an ssh command to one sandbox: opts go before the
// destination, remote (if any) after it.
type SSH func(ctx context.Context, opts []string, remote ...string) *exec.Cmd

// Ctx is a context that ends with the test or after d.
func Ctx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// SyncBuffer is a bytes.Buffer safe for a process writing while a test reads.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Proc is a command running in the background.
type Proc struct {
	Stderr *SyncBuffer
	Done   chan struct{} // closed when the command exited
}

// Wait waits for the command to exit, at most d.
func (p *Proc) Wait(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case <-p.Done:
	case <-time.After(d):
		t.Fatalf("command still running after %v; stderr %s", d, p.Stderr.String())
	}
}

// Background starts cmd and kills it when the test ends, logging its
// stderr if the test failed.
func Background(t testing.TB, cmd *exec.Cmd) *Proc {
	t.Helper()
	p := &Proc{Stderr: &SyncBuffer{}, Done: make(chan struct{})}
	cmd.Stderr = p.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(p.Done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.Done
		if t.Failed() {
			t.Logf("%v stderr:\n%s", cmd.Args, p.Stderr.String())
		}
	})
	return p
}

// FreePort is a loopback port that was free a moment ago.
func FreePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, p, _ := net.SplitHostPort(ln.Addr().String())
	return p
}

// WaitTCP polls until something accepts on addr.
func WaitTCP(t testing.TB, addr string) {
	t.Helper()
	waitTCP(t, addr, nil, func() string { return "" })
}

// WaitTCP polls until something accepts on addr, failing at once (with
// the command's stderr) if the command exits first.
func (p *Proc) WaitTCP(t testing.TB, addr string) {
	t.Helper()
	waitTCP(t, addr, p.Done, p.Stderr.String)
}

// waitTCP polls addr for up to 20 s; a closed exited ends the wait early.
func waitTCP(t testing.TB, addr string, exited <-chan struct{}, stderr func() string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return
		}
		select {
		case <-exited:
			t.Fatalf("exited before listening on %s: %s", addr, stderr())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listening on %s %s", addr, stderr())
		}
	}
}

// Require returns the path of tool and fails the test if it is not
// installed; pkg is the Debian package that has it (.ci/run installs it).
func Require(t testing.TB, tool, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(tool)
	if err != nil {
		t.Fatalf("%s is required (apt-get install %s): %v", tool, pkg, err)
	}
	return path
}

// Curl runs curl -sS with args and returns its output.
func Curl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.CommandContext(Ctx(t, 30*time.Second), "curl", append([]string{"-sS", "--max-time", "20"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("curl %v: %v: %s", args, err, out)
	}
	return string(out)
}

// LoopbackHTTP serves body on 127.0.0.1 and returns host:port.
func LoopbackHTTP(t testing.TB, body string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, body) }))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// TTYShell runs an interactive shell under ssh -tt: a command the shell
// evaluates, the pty's window size, and the exit code.
func TTYShell(t *testing.T, ssh SSH) {
	cmd := ssh(Ctx(t, time.Minute), []string{"-tt"})
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	errb := &SyncBuffer{}
	cmd.Stderr = errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	expect := func(want string) {
		t.Helper()
		timeout := time.After(20 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("output ended before %q; stderr %s", want, errb.String())
				}
				// The pty echoes input; the arithmetic proves the shell ran it.
				if strings.Contains(l, want) && !strings.Contains(l, "echo") {
					return
				}
			case <-timeout:
				t.Fatalf("no %q in the shell's output", want)
			}
		}
	}
	_, _ = io.WriteString(stdin, "echo result-$((6*7)) $(tty | cut -c1-8)\n")
	expect("result-42 /dev/pts")
	_, _ = io.WriteString(stdin, "echo size-$(stty size | tr ' ' x)\n")
	expect("size-") // window size from pty-req: rows x cols
	_, _ = io.WriteString(stdin, "exit 7\n")
	for range lines {
	}
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 7 {
		t.Fatalf("interactive exit %d, want 7; stderr %s", code, errb.String())
	}
}

// BulkRoundTrip pipes size pseudo-random bytes through `cat` in the
// sandbox and checks every byte comes back in order.
func BulkRoundTrip(t *testing.T, ssh SSH, size int64) {
	cmd := ssh(Ctx(t, 5*time.Minute), nil, "cat")
	sent, got := sha256.New(), sha256.New()
	cmd.Stdin = io.TeeReader(io.LimitReader(rand.NewChaCha8([32]byte{7}), size), sent)
	stdout, _ := cmd.StdoutPipe()
	var errb bytes.Buffer
	cmd.Stderr = &errb
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(got, stdout)
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("ssh cat: %v: %s", err, errb.String())
	}
	if n != size || !bytes.Equal(sent.Sum(nil), got.Sum(nil)) {
		t.Fatalf("got %d bytes back (sha256 %x), want %d bytes (sha256 %x)", n, got.Sum(nil), size, sent.Sum(nil))
	}
	t.Logf("%d MiB round trip in %v", size>>20, time.Since(start).Round(time.Millisecond))
}

// LocalForward: ssh -L to a server that binds 127.0.0.1 in the sandbox.
func LocalForward(t *testing.T, ssh SSH) {
	target := LoopbackHTTP(t, "through -L")
	lport := FreePort(t)
	Background(t, ssh(Ctx(t, time.Minute), []string{"-N", "-o", "ExitOnForwardFailure=yes", "-L", lport + ":" + target}))
	WaitTCP(t, "127.0.0.1:"+lport)
	if got := Curl(t, "http://127.0.0.1:"+lport+"/"); got != "through -L" {
		t.Fatalf("GET through -L: got %q, want %q", got, "through -L")
	}
}

// DynamicForward: ssh -D, with the name resolved on the sandbox side
// (--socks5-hostname) as VS Code does.
func DynamicForward(t *testing.T, ssh SSH) {
	target := LoopbackHTTP(t, "through -D")
	dport := FreePort(t)
	Background(t, ssh(Ctx(t, time.Minute), []string{"-N", "-o", "ExitOnForwardFailure=yes", "-D", "127.0.0.1:" + dport}))
	WaitTCP(t, "127.0.0.1:"+dport)
	_, tport, _ := net.SplitHostPort(target)
	if got := Curl(t, "--socks5-hostname", "127.0.0.1:"+dport, "http://localhost:"+tport+"/"); got != "through -D" {
		t.Fatalf("GET through -D: got %q, want %q", got, "through -D")
	}
}

// RemoteForward: ssh -R, then a request made inside the sandbox (over an
// exec session) reaches a server on the client's side.
func RemoteForward(t *testing.T, ssh SSH) {
	clientSide := LoopbackHTTP(t, "through -R")
	rport := FreePort(t)
	Background(t, ssh(Ctx(t, time.Minute), []string{"-N", "-o", "ExitOnForwardFailure=yes", "-R", "127.0.0.1:" + rport + ":" + clientSide}))
	WaitTCP(t, "127.0.0.1:"+rport) // the sandbox's server listens
	out, err := ssh(Ctx(t, time.Minute), nil, "curl -sS --max-time 20 http://127.0.0.1:"+rport+"/").Output()
	if err != nil || string(out) != "through -R" {
		t.Fatalf("GET through -R from inside the sandbox: %q %v", out, err)
	}
}

// VSCodePattern is what Remote-SSH does: `ssh -T -D port host bash` fed a
// script on stdin that starts a server in the sandbox, then HTTP to that
// server through the SOCKS forward.
func VSCodePattern(t *testing.T, ssh SSH) {
	Require(t, "python3", "python3")
	webroot := t.TempDir()
	if err := os.WriteFile(filepath.Join(webroot, "index.html"), []byte("vscode-server-ok"), 0o644); err != nil {
		t.Fatal(err)
	}
	dport, sport := FreePort(t), FreePort(t)
	cmd := ssh(Ctx(t, time.Minute), []string{"-T", "-D", "127.0.0.1:" + dport}, "bash")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	session := Background(t, cmd)
	fmt.Fprintf(stdin, "cd %s\npython3 -m http.server --bind 127.0.0.1 %s >/dev/null 2>&1 &\nsrv=$!\n"+
		"for i in $(seq 100); do (exec 4<>/dev/tcp/127.0.0.1/%s) 2>/dev/null && break; sleep 0.1; done\necho listening=%s\n",
		webroot, sport, sport, sport)
	line := make([]byte, 64)
	n, err := io.ReadAtLeast(stdout, line, len("listening="+sport))
	if err != nil || !strings.Contains(string(line[:n]), "listening="+sport) {
		t.Fatalf("script output %q (%v), want listening=%s", line[:n], err, sport)
	}
	WaitTCP(t, "127.0.0.1:"+dport)
	if got := Curl(t, "--socks5-hostname", "127.0.0.1:"+dport, "http://127.0.0.1:"+sport+"/index.html"); got != "vscode-server-ok" {
		t.Fatalf("GET via SOCKS: got %q, want vscode-server-ok", got)
	}
	// The server must not outlive the test: waiting for the session to
	// end makes sure its shell got this far (killing ssh at the test's
	// end left python running on the machine, its port open).
	_, _ = io.WriteString(stdin, "kill $srv; wait $srv; exit 0\n")
	stdin.Close()
	session.Wait(t, 30*time.Second)
}

// ParallelSessions runs n sessions at once, spread over targets.
func ParallelSessions(t *testing.T, targets []SSH, n int) {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// stdout only: the machine's shell start-up files may write to
			// stderr when many logins race.
			// A hang detector: fifty sshd logins at once took 94-105 s
			// to finish under -race at load 35-66 (cmd/sbx, sshd mode).
			out, err := targets[i%len(targets)](Ctx(t, 5*time.Minute), nil, fmt.Sprintf("sleep 1; echo session-%d", i)).Output()
			if err != nil || strings.TrimSpace(string(out)) != fmt.Sprintf("session-%d", i) {
				errs <- fmt.Errorf("session %d to target %d: %v: %q", i, i%len(targets), err, out)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// Multiplexed runs n commands over one OpenSSH connection shared through
// a ControlMaster, as VS Code and agents do, a few at a time. Each must
// end with its own exit status and output: a session that loses its
// exit-status ends with 255 and "no exit status" instead.
func Multiplexed(t *testing.T, ssh SSH, n int) {
	// A unix socket's path holds about 100 bytes, and t.TempDir's can be
	// longer than that.
	dir, err := os.MkdirTemp("", "mux")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ctl := []string{"-o", "ControlPath=" + filepath.Join(dir, "c")}
	master := Background(t, ssh(Ctx(t, 10*time.Minute), append([]string{"-M", "-N", "-o", "ControlPersist=no"}, ctl...)))
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if ssh(Ctx(t, 10*time.Second), append([]string{"-O", "check"}, ctl...)).Run() == nil {
			break
		}
		select {
		case <-master.Done:
			t.Fatalf("control master exited: %s", master.Stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("control master not up after 30 s: %s", master.Stderr.String())
		}
	}
	mux := append([]string{"-o", "ControlMaster=no"}, ctl...)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed []string
	)
	sem := make(chan struct{}, 4)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			want := i % 3
			cmd := ssh(Ctx(t, 2*time.Minute), mux, fmt.Sprintf("echo mux-%d; exit %d", i, want))
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			code := cmd.ProcessState.ExitCode()
			if err != nil && code == 0 || code != want || string(out) != fmt.Sprintf("mux-%d\n", i) {
				mu.Lock()
				failed = append(failed, fmt.Sprintf("command %d: exit %d (%v) stdout %q stderr %q, want exit %d", i, code, err, out, strings.TrimSpace(stderr.String()), want))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(failed) > 0 {
		t.Errorf("%d of %d multiplexed commands failed; first: %s", len(failed), n, failed[0])
	}
	select {
	case <-master.Done:
		t.Errorf("control master exited during the run: %s", master.Stderr.String())
	default:
	}
}
