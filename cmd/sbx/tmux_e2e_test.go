package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sbxedge/sbx/internal/testkit/sshscenario"
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
	s.tmux(append([]string{"send-keys"}, keys...)...)
}

// tmux runs a tmux command on the session's server.
func (s *tmuxSession) tmux(args ...string) string {
	s.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-S", s.sock}, args...)...).CombinedOutput()
	if err != nil {
		s.t.Fatalf("tmux %v: %v %s", args, err, out)
	}
	return string(out)
}

// child is the process the pane's shell runs in the foreground.
func (s *tmuxSession) child() int {
	s.t.Helper()
	pid := strings.TrimSpace(s.tmux("display-message", "-p", "#{pane_pid}"))
	b, err := os.ReadFile(filepath.Join("/proc", pid, "task", pid, "children"))
	if err != nil {
		s.t.Fatal(err)
	}
	kids := strings.Fields(string(b))
	if len(kids) != 1 {
		s.t.Fatalf("pane shell %s has children %q, want one", pid, kids)
	}
	n, err := strconv.Atoi(kids[0])
	if err != nil {
		s.t.Fatal(err)
	}
	return n
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
// states on stderr; exec -it gives an interactive shell on a tty over the
// API's terminal stream (not SSH) that follows resizes, takes Ctrl-C as a
// key, exits with the shell's status and restores the local terminal
// when sbx is killed; with stderr redirected to a file nothing but the
// result is written.
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
	// races the end of the session (typed while it closes, it was lost).
	before := apiRequests(t, p)
	s.send(fmt.Sprintf("%s exec -it $ID -- sh; echo exec-exit-$?", bin), "Enter")
	s.send("tty; echo answer-$((6*7))", "Enter")
	pane = s.waitFor("answer-42")
	if !strings.Contains(pane, "/dev/pts/") {
		t.Errorf("exec -it gave no terminal (tty printed no /dev/pts):\n%s", pane)
	}
	// The remote terminal follows the window (SIGWINCH, a resize frame).
	s.tmux("resize-window", "-x", "150", "-y", "40")
	s.send("stty size | sed 's/ /x/'", "Enter")
	s.waitFor("40x150")
	// Ctrl-C is a key for the remote terminal: it interrupts the remote
	// sleep and the shell (and sbx) stay.
	s.send("echo sleep$((1+1))ing; sleep 600", "Enter")
	s.waitFor("sleep2ing")
	s.send("C-c")
	s.send("echo back-$((2+3))", "Enter")
	s.waitFor("back-5")
	s.send("exit 3", "Enter")
	s.waitFor("exec-exit-3")
	after := apiRequests(t, p)
	if got := after[streamRoute] - before[streamRoute]; got != 1 {
		t.Errorf("exec -it opened %v terminal streams, want 1 (the WebSocket)", got)
	}
	if got := after[sshTokenRoute] - before[sshTokenRoute]; got != 0 {
		t.Errorf("exec -it minted %v SSH credentials, want none (it must not go over SSH)", got)
	}

	// A signal to sbx leaves the terminal as it found it: the next
	// command line runs (in raw mode Enter would not end the line).
	s.send(fmt.Sprintf("%s exec -it $ID -- sh; echo term-exit-$?", bin), "Enter")
	s.send("echo in-$((1+2))", "Enter")
	s.waitFor("in-3")
	if err := syscall.Kill(s.child(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	s.waitFor("term-exit-1")
	s.send(`case "$(stty -a)" in *-icanon*) echo still-raw;; *) echo cooked-$((3*3));; esac`, "Enter")
	s.waitFor("cooked-9")

	// Not a terminal: the progress stays out of files.
	errFile := filepath.Join(home, "create.err")
	s.send(fmt.Sprintf("%s create -o id 2>%s >/dev/null; echo done-quiet", bin, errFile), "Enter")
	s.waitFor("done-quiet")
	if b, _ := os.ReadFile(errFile); len(b) != 0 {
		t.Errorf("create wrote %q to a non-terminal stderr, want nothing", b)
	}
}
