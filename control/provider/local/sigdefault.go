package local

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// inheritDefaultSignals makes the sandbox's processes start with the
// default action for SIGHUP and SIGINT, however this process was
// started. A process started under nohup (SIGHUP ignored) or as a
// background job of a script (SIGINT ignored) passes the ignored
// disposition through exec to every child: a terminal's hang-up
// (podssh.Terminal.Close) or Ctrl-C would then not reach the sandbox's
// commands, and a stream ended for a revoked token would leave its
// command running. Go keeps these two ignored until a handler is
// installed; with one installed, exec resets them to the default in the
// child. The channel is never read and holds one signal, so for this
// process a SIGHUP or SIGINT that nothing else asked for stays without
// effect, as before.
var inheritDefaultSignals = sync.OnceFunc(unignoreForChildren)

func unignoreForChildren() {
	for _, sig := range []os.Signal{syscall.SIGHUP, syscall.SIGINT} {
		if signal.Ignored(sig) {
			signal.Notify(make(chan os.Signal, 1), sig)
		}
	}
}
