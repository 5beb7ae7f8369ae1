package sshbroker

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestInteractivePTY(t *testing.T) {
	e := newEnv(t, nil)
	k := e.grant("alpha", nil)
	cmd := e.ssh(testCtx(t, 30*time.Second), k, "alpha", []string{"-tt", "-o", "SetEnv=SBX_PROBE=relayed"})
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb syncBuf
	cmd.Stderr = &errb
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
		timeout := time.After(15 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("output ended before %q; stderr %s", want, errb.String())
				}
				if strings.Contains(l, want) && !strings.Contains(l, "echo") {
					return
				}
			case <-timeout:
				t.Fatalf("no %q in output", want)
			}
		}
	}
	// Arithmetic proves the shell ran it, not that the pty echoed it.
	io.WriteString(stdin, "echo result-$((6*7)) $(tty | cut -c1-8)\n")
	expect("result-42 /dev/pts")
	io.WriteString(stdin, "stty size\n")
	expect(" ") // window size from pty-req: rows cols
	io.WriteString(stdin, "exit 7\n")
	for range lines {
	}
	err = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 7 {
		t.Fatalf("interactive exit: got code %d (%v), want 7; stderr %s", code, err, errb.String())
	}
}

// TestBulkStdinRoundTrip pipes 200 MiB through `cat` on the sandbox and
// checks every byte comes back in order.
func TestBulkStdinRoundTrip(t *testing.T) {
	e := newEnv(t, nil)
	k := e.grant("alpha", nil)
	const size = 200 << 20
	cmd := e.ssh(testCtx(t, 5*time.Minute), k, "alpha", nil, "cat")
	src := io.LimitReader(rand.NewChaCha8([32]byte{1, 2, 3}), size)
	sentHash, gotHash := sha256.New(), sha256.New()
	cmd.Stdin = io.TeeReader(src, sentHash)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(gotHash, stdout)
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("ssh cat: %v: %s", err, errb.String())
	}
	if n != size || !bytes.Equal(sentHash.Sum(nil), gotHash.Sum(nil)) {
		t.Fatalf("round trip: got %d bytes sha256 %x, want %d bytes sha256 %x", n, gotHash.Sum(nil), size, sentHash.Sum(nil))
	}
	t.Logf("200 MiB round trip in %v", time.Since(start).Round(time.Millisecond))
}

func TestSCPAndSFTP(t *testing.T) {
	e := newEnv(t, nil)
	k := e.grant("alpha", nil)
	local := filepath.Join(e.dir, "local.bin")
	data := make([]byte, 3<<20+17)
	rand.NewChaCha8([32]byte{9}).Read(data)
	if err := os.WriteFile(local, data, 0o644); err != nil {
		t.Fatal(err)
	}
	remoteDir := t.TempDir() // the sandbox is this machine
	scpArgs := func(extra ...string) []string {
		return append(append(e.sshArgs(k), "-P", e.port), extra...)
	}
	check := func(t *testing.T, path string) {
		t.Helper()
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("%s: got %d bytes, want the %d sent", path, len(got), len(data))
		}
	}
	runOK := func(t *testing.T, name string, args []string, stdin string) {
		t.Helper()
		cmd := exec.CommandContext(testCtx(t, time.Minute), name, args...)
		r := run(t, cmd, strings.NewReader(stdin))
		if r.code != 0 {
			t.Fatalf("%s %v: code %d stderr %s", name, args, r.code, r.stderr)
		}
	}
	for _, mode := range []struct{ name, flag string }{{"scp-sftp-protocol", "-s"}, {"scp-legacy-protocol", "-O"}} {
		t.Run(mode.name, func(t *testing.T) {
			up := filepath.Join(remoteDir, mode.name+".up")
			runOK(t, "scp", scpArgs(mode.flag, local, "alpha@127.0.0.1:"+up), "")
			check(t, up)
			down := filepath.Join(e.dir, mode.name+".down")
			runOK(t, "scp", scpArgs(mode.flag, "alpha@127.0.0.1:"+up, down), "")
			check(t, down)
		})
	}
	t.Run("sftp", func(t *testing.T) {
		up := filepath.Join(remoteDir, "sftp.up")
		down := filepath.Join(e.dir, "sftp.down")
		batch := "put " + local + " " + up + "\nget " + up + " " + down + "\nls -l " + up + "\n"
		args := append(append(e.sshArgs(k), "-P", e.port, "-b", "-"), "alpha@127.0.0.1")
		runOK(t, "sftp", args, batch)
		check(t, up)
		check(t, down)
	})
}
