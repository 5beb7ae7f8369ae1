package sshbroker

import (
	"bytes"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sbxedge/sbx/internal/testkit/sshscenario"
)

func TestInteractivePTY(t *testing.T) {
	sshscenario.TTYShell(t, granted(t))
}

// TestBulkStdinRoundTrip pipes 200 MiB through `cat` on the sandbox and
// checks every byte comes back in order.
func TestBulkStdinRoundTrip(t *testing.T) {
	sshscenario.BulkRoundTrip(t, granted(t), 200<<20)
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
