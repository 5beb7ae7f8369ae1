package sandboxinit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sbxedge/sbx/internal/testkit/waitfor"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newSup(t *testing.T) *Supervisor {
	t.Helper()
	s, err := New(Config{Workspace: t.TempDir(), Env: []string{"PATH=/usr/bin:/bin"}, MinBackoff: 20 * time.Millisecond, MaxBackoff: 80 * time.Millisecond, StopGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// waitFor polls cond (bounded) and fails with what it last saw.
func waitFor(t *testing.T, s *Supervisor, what string, cond func(Status) bool) Status {
	t.Helper()
	var last []Status
	var found Status
	if waitfor.Try(t, 20*time.Second, func() bool {
		last = s.List()
		for _, st := range last {
			if cond(st) {
				found = st
				return true
			}
		}
		return false
	}) {
		return found
	}
	t.Fatalf("no service %s; last list %+v", what, last)
	return Status{}
}

func TestBackoffDoublesToTheCap(t *testing.T) {
	c := Config{MinBackoff: 500 * time.Millisecond, MaxBackoff: 4 * time.Second}
	for n, want := range map[int]time.Duration{1: 500 * time.Millisecond, 2: time.Second, 3: 2 * time.Second, 4: 4 * time.Second, 9: 4 * time.Second} {
		if got := c.Backoff(n); got != want {
			t.Errorf("Backoff(%d) = %s, want %s", n, got, want)
		}
	}
}

func TestCrashingServiceRestartsWithItsExitCode(t *testing.T) {
	s := newSup(t)
	if err := s.Put(Service{Name: "crash", Command: "echo up; exit 3"}); err != nil {
		t.Fatal(err)
	}
	st := waitFor(t, s, "restarted after exiting 3", func(st Status) bool {
		return st.Starts >= 3 && st.ExitCode != nil && *st.ExitCode == 3
	})
	if st.LastStartAt == nil || st.LastExitAt == nil {
		t.Errorf("status %+v: want last start and exit times", st)
	}
	// Its quick exits are counted, which is what a preview stops
	// waiting on.
	waitFor(t, s, "with 3 quick exits in a row", func(st Status) bool { return st.QuickExits >= 3 })
	var lines []string
	_ = s.Logs(t.Context(), "crash", 100, false, func(l Line) error { lines = append(lines, l.Text); return nil })
	all := strings.Join(lines, "\n")
	if strings.Count(all, "sbx-init: starting crash") < 2 || !strings.Contains(all, "exited with code 3; restarting in") || !strings.Contains(all, "\nup\n") {
		t.Errorf("logs do not show the starts and exits:\n%s", all)
	}
}

func TestServiceIsRunningOnlyOncePortAnswers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	// Count the probes of this port, to check the state after several.
	var probes atomic.Int32
	t.Cleanup(func() { portAnswers = PortAnswers }) // after s.Close
	portAnswers = func(p int) bool {
		ok := PortAnswers(p)
		if p == port {
			probes.Add(1)
		}
		return ok
	}
	s := newSup(t)
	// Listens only after reading a line that never comes: stays starting.
	if err := s.Put(Service{Name: "web", Command: "sleep 30", Port: port}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, s, "web started", func(st Status) bool { return st.Name == "web" && st.PID != 0 })
	waitfor.Cond(t, 10*time.Second, "3 probes of the port", func() bool { return probes.Load() >= 3 })
	if st := s.List()[0]; st.State != StateStarting {
		t.Fatalf("nothing listens on %d, state %q, want starting", port, st.State)
	}
	ln, err = net.Listen("tcp", fmt.Sprintf("[::1]:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	waitFor(t, s, "web running once ::1 answers", func(st Status) bool { return st.State == StateRunning })
}

func TestSyncStartsChangesAndStops(t *testing.T) {
	s := newSup(t)
	a := Service{Name: "a", Command: "sleep 30"}
	b := Service{Name: "b", Command: "sleep 30"}
	if err := s.Sync([]Service{a, b}); err != nil {
		t.Fatal(err)
	}
	pa := waitFor(t, s, "a running", func(st Status) bool { return st.Name == "a" && st.State == StateRunning }).PID
	b.Env = map[string]string{"X": "1"}
	if err := s.Sync([]Service{a, b}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, s, "b running again", func(st Status) bool { return st.Name == "b" && st.State == StateRunning && st.Env["X"] == "1" })
	if got := s.List()[0]; got.Name != "a" || got.PID != pa || got.Starts != 1 {
		t.Errorf("unchanged a was touched: %+v (pid was %d)", got, pa)
	}
	if err := s.Sync(nil); err != nil {
		t.Fatal(err)
	}
	if got := s.List(); len(got) != 0 {
		t.Errorf("after sync of none: %+v", got)
	}
	if err := s.Put(Service{Name: "Bad Name", Command: "x"}); err == nil {
		t.Error("a bad name was accepted")
	}
}

func TestServeFollowsLogs(t *testing.T) {
	s := newSup(t)
	if err := s.Put(Service{Name: "tick", Command: "for i in 1 2 3; do echo tick $i; sleep 0.05; done; sleep 30"}); err != nil {
		t.Fatal(err)
	}
	c1, c2 := net.Pipe()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, c1) }()
	go func() { _ = json.NewEncoder(c2).Encode(Request{Op: "logs", Name: "tick", Follow: true}) }()
	dec := json.NewDecoder(c2)
	var first Response
	if err := dec.Decode(&first); err != nil || first.Error != "" {
		t.Fatalf("first answer %+v, %v", first, err)
	}
	var got []string
	for len(got) < 3 {
		var l Line
		if err := dec.Decode(&l); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(l.Text, "tick") {
			got = append(got, l.Text)
		}
	}
	cancel()
	c2.Close()
	<-done
	c1.Close()
	if strings.Join(got, ",") != "tick 1,tick 2,tick 3" {
		t.Errorf("followed %q", got)
	}
}

// TestLogsOutliveTheInit: a restored sandbox has a fresh init, and its
// services' logs still show the runs before the suspend.
func TestLogsOutliveTheInit(t *testing.T) {
	dir := t.TempDir()
	for run := 1; run <= 2; run++ {
		s, err := New(Config{Workspace: t.TempDir(), LogDir: dir, LogLines: 5})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Put(Service{Name: "web", Command: fmt.Sprintf("echo run %d; sleep 30", run)}); err != nil {
			t.Fatal(err)
		}
		waitForLine(t, s, "web", fmt.Sprintf("run %d", run))
		s.Close()
	}
	s, err := New(Config{Workspace: t.TempDir(), LogDir: dir, LogLines: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Put(Service{Name: "web", Command: "sleep 30"}); err != nil {
		t.Fatal(err)
	}
	all := waitForLine(t, s, "web", "starting web: sleep 30")
	if !strings.Contains(all, "run 1") || !strings.Contains(all, "run 2") || strings.Count(all, "sbx-init: starting web") != 3 {
		t.Errorf("third init's log (ring of 5) =\n%s\nwant both earlier runs and three starts", all)
	}
}

func waitForLine(t *testing.T, s *Supervisor, name, want string) string {
	t.Helper()
	var all string
	if waitfor.Try(t, 10*time.Second, func() bool {
		var lines []string
		_ = s.Logs(t.Context(), name, 100, false, func(l Line) error { lines = append(lines, l.Text); return nil })
		all = strings.Join(lines, "\n")
		return strings.Contains(all, want)
	}) {
		return all
	}
	t.Fatalf("no line %q in:\n%s", want, all)
	return ""
}

// TestFollowEndsWhenThePeerLeaves: through sshd, a caller leaving a
// followed log shows only as its side closing (sshd closes the relay's
// stdin, which half-closes the socket); the init must end the call then,
// not when the quiet service next prints.
func TestFollowEndsWhenThePeerLeaves(t *testing.T) {
	s := newSup(t)
	if err := s.Put(Service{Name: "quiet", Command: "echo once; sleep 30"}); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "init.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.ServeListener(t.Context(), ln) }()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := json.NewEncoder(c).Encode(Request{Op: "logs", Name: "quiet", Follow: true}); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(c)
	var first Response
	if err := dec.Decode(&first); err != nil || first.Error != "" {
		t.Fatalf("first answer %+v, %v", first, err)
	}
	if err := c.(*net.UnixConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		var l Line
		if err := dec.Decode(&l); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("after the half-close: %v, want the init to close the call (EOF)", err)
			}
			break
		}
	}
	ln.Close()
	if err := <-served; err != nil {
		t.Errorf("ServeListener after its listener closed: %v, want nil", err)
	}
}

// A cwd that is not there must be named in the log, not reported as the
// program missing.
func TestMissingCwdIsNamedInTheLog(t *testing.T) {
	s := newSup(t)
	if err := s.Put(Service{Name: "web", Command: "/bin/sh", Args: []string{"-c", "true"}, Cwd: "app"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, s, "web failed to start", func(st Status) bool { return st.Starts >= 1 && st.ExitCode != nil })
	var lines []string
	_ = s.Logs(t.Context(), "web", 100, false, func(l Line) error { lines = append(lines, l.Text); return nil })
	all := strings.Join(lines, "\n")
	if !strings.Contains(all, `cwd "app" is not a folder in the workspace`) {
		t.Errorf("log does not name the missing cwd:\n%s", all)
	}
}
