package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sbxedge/sbx/internal/sshscenario"
)

// tmuxSession is one tmux server on a private socket with one pane.
type tmuxSession struct {
	t    *testing.T
	sock string
}

func newTmux(t *testing.T, env []string) *tmuxSession {
	t.Helper()
	sshscenario.Require(t, "tmux", "tmux")
	s := &tmuxSession{t: t, sock: filepath.Join(t.TempDir(), "tmux.sock")}
	cmd := exec.Command("tmux", "-S", s.sock, "-f", "/dev/null", "new-session", "-d", "-x", "200", "-y", "50", "sh")
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tmux new-session: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("tmux", "-S", s.sock, "kill-server").Run() })
	return s
}

func (s *tmuxSession) send(keys ...string) {
	s.t.Helper()
	if out, err := exec.Command("tmux", append([]string{"-S", s.sock, "send-keys"}, keys...)...).CombinedOutput(); err != nil {
		s.t.Fatalf("tmux send-keys: %v %s", err, out)
	}
}

func (s *tmuxSession) capture() string {
	s.t.Helper()
	out, err := exec.Command("tmux", "-S", s.sock, "capture-pane", "-p", "-J", "-S", "-200").Output()
	if err != nil {
		s.t.Fatalf("tmux capture-pane: %v", err)
	}
	return string(out)
}

// waitFor polls the pane until it shows want (a hang detector, not a
// speed check).
func (s *tmuxSession) waitFor(want string) string {
	s.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		pane := s.capture()
		if strings.Contains(pane, want) {
			return pane
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("pane never showed %q:\n%s", want, pane)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestTerminal drives the CLI on a real terminal (tmux): create shows its
// states on stderr, exec -it gives an interactive shell on a tty, and
// with stderr redirected to a file nothing but the result is written.
func TestTerminal(t *testing.T) {
	p := startDev(t, t.TempDir(), "")
	home := t.TempDir()
	env := append(os.Environ(), "HOME="+home, "SBX_API="+p.API, "SBX_TOKEN="+p.Token,
		"SBX_CONFIG_DIR="+filepath.Join(home, "cfg"), "PS1=$ ", "TERM=xterm")
	s := newTmux(t, env)
	bin := sbxBinary(t)

	s.send(fmt.Sprintf("ID=$(%s create -o id) && echo created-id $ID", bin), "Enter")
	pane := s.waitFor("created-id sbx-")
	if !strings.Contains(pane, "pending → ready") {
		t.Errorf("create showed no progress on the terminal:\n%s", pane)
	}

	// The exit status is echoed by the same command line, so no keystroke
	// races the end of the session (typed while ssh closes, it was lost).
	s.send(fmt.Sprintf("%s exec -it $ID -- sh; echo exec-exit-$?", bin), "Enter")
	s.send("tty; echo answer-$((6*7))", "Enter")
	pane = s.waitFor("answer-42")
	if !strings.Contains(pane, "/dev/pts/") {
		t.Errorf("exec -it gave no terminal (tty printed no /dev/pts):\n%s", pane)
	}
	s.send("exit 3", "Enter")
	s.waitFor("exec-exit-3")

	// Not a terminal: the progress stays out of files.
	errFile := filepath.Join(home, "create.err")
	s.send(fmt.Sprintf("%s create -o id 2>%s >/dev/null; echo done-quiet", bin, errFile), "Enter")
	s.waitFor("done-quiet")
	if b, _ := os.ReadFile(errFile); len(b) != 0 {
		t.Errorf("create wrote %q to a non-terminal stderr, want nothing", b)
	}
}
