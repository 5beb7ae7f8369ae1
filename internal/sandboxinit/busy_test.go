package sandboxinit

import (
	"context"
	"net"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"
)

// TestProcScanSample: of the processes carrying a sandbox's marker, a
// plain one (a nohup loop) is work; a service's, one listening on a TCP
// port (a dev server started by hand) and another sandbox's are not. A
// busy loop shows as CPU.
func TestProcScanSample(t *testing.T) {
	mark := "SBX_TEST_SANDBOX=" + t.Name()
	start := func(env []string, name string, args ...string) *exec.Cmd {
		t.Helper()
		c := exec.Command(name, args...)
		c.Env = append(os.Environ(), env...)
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
		return c
	}
	loop := start([]string{mark}, "sleep", "30")
	svc := start([]string{mark, "SBX_SERVICE=web"}, "sleep", "30")
	other := start([]string{"SBX_TEST_SANDBOX=another"}, "sleep", "30")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	srv := exec.Command("sleep", "30")
	srv.Env = append(os.Environ(), mark)
	srv.ExtraFiles = []*os.File{f} // holds the listening socket, as a server does
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })

	scan := ProcScan{Window: 100 * time.Millisecond, Belongs: func(env []byte) bool { return hasEnvForTest(env, mark) }}
	b, err := scan.Sample(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, p := range b.Processes {
		pids = append(pids, p.PID)
	}
	if !slices.Contains(pids, loop.Process.Pid) {
		t.Errorf("the plain process %d is not work: %+v", loop.Process.Pid, b)
	}
	for name, c := range map[string]*exec.Cmd{"service": svc, "other sandbox's": other, "listening": srv} {
		if slices.Contains(pids, c.Process.Pid) {
			t.Errorf("the %s process %d counts as work: %+v", name, c.Process.Pid, b)
		}
	}
	if b.CPU >= 0.1 {
		t.Errorf("sleeping processes use %.2f cores", b.CPU)
	}
	// Excluded (the call's relay): not work.
	if b, _ := scan.Sample(context.Background(), []int{loop.Process.Pid}); len(b.Processes) != 0 {
		t.Errorf("an excluded PID counts as work: %+v", b)
	}

	spin := start([]string{mark, "SBX_SERVICE=spin"}, "sh", "-c", "while :; do :; done")
	_ = spin
	b, err = ProcScan{Window: 500 * time.Millisecond, Belongs: scan.Belongs}.Sample(context.Background(), nil)
	if err != nil || b.CPU <= 0.01 {
		t.Errorf("a spinning service: CPU %.2f, %v; want its CPU counted (the machine is shared, so no more is asserted)", b.CPU, err)
	}
}

func hasEnvForTest(env []byte, kv string) bool {
	for _, e := range splitNUL(env) {
		if e == kv {
			return true
		}
	}
	return false
}

func splitNUL(b []byte) []string {
	var out []string
	start := 0
	for i, c := range b {
		if c == 0 {
			out = append(out, string(b[start:i]))
			start = i + 1
		}
	}
	return append(out, string(b[start:]))
}
