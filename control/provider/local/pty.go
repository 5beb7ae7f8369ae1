package local

import (
	"fmt"
	"io"
	"os/exec"
	"sync"
	"time"

	"github.com/creack/pty"
	gliderssh "github.com/gliderlabs/ssh"
)

// ptyState is a session's pty request, read by the SessionRequestCallback.
// gliderlabs' Session.Pty copies the request while the goroutine handling
// the session's requests may be writing a window-change into it (a resize
// sent right after the command: a data race). The callback runs on that
// goroutine before the handler starts, so the copy is taken there and the
// handler reads it from embedded.ptys instead.
type ptyState struct {
	req   gliderssh.Pty
	winCh <-chan gliderssh.Window
}

// runPty runs cmd on a new pseudo-terminal. pty.Start makes the process a
// session (and process group) leader, so its pid is the group to signal.
func (e *embedded) runPty(s gliderssh.Session, cmd *exec.Cmd, req gliderssh.Pty, winCh <-chan gliderssh.Window) {
	ptmx, err := pty.StartWithSize(cmd, winsize(req.Window))
	if err != nil {
		fmt.Fprintf(s.Stderr(), "sbx: start pty: %v\n", err)
		_ = s.Exit(255)
		return
	}
	pgid := cmd.Process.Pid
	e.track(pgid, true)

	var ptmxMu sync.Mutex // guards ptmxClosed: resizes must not race Close
	ptmxClosed := false
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		// winCh is closed by gliderlabs when the session's requests end.
		defer wg.Done()
		for w := range winCh {
			ptmxMu.Lock()
			if !ptmxClosed {
				_ = pty.Setsize(ptmx, winsize(w))
			}
			ptmxMu.Unlock()
		}
	}()
	go func() {
		defer wg.Done()
		_, _ = io.Copy(ptmx, s) // ends when the channel or ptmx closes
	}()
	outDone := make(chan struct{})
	go func() {
		defer wg.Done()
		defer close(outDone)
		_, _ = io.Copy(s, ptmx) // ends with EIO once every tty holder exits
	}()

	stopSignals := e.relaySignals(s, pgid)
	err = cmd.Wait()
	stopSignals()
	e.track(pgid, false)
	// Drain what the shell wrote last. Background jobs may keep the tty
	// open; like a hung-up terminal the session ends with its shell, so
	// they get a moment, not a wait.
	select {
	case <-outDone:
	case <-time.After(time.Second):
	}
	ptmxMu.Lock()
	ptmxClosed = true
	ptmx.Close()
	ptmxMu.Unlock()
	<-outDone
	exitSession(s, cmd, err)
	wg.Wait()
}

func winsize(w gliderssh.Window) *pty.Winsize {
	return &pty.Winsize{Rows: uint16(w.Height), Cols: uint16(w.Width)}
}
