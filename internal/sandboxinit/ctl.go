package sandboxinit

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
)

// Ctl is the init's control command, "ctl [--socket S] [--run-dir D]",
// which sshd runs for the sbx-init subsystem. sbx-init runs it, and so
// does any program standing in for sbx-init where none is installed (sbx
// as "sbx sandbox-init ctl", for a local sandbox under sshd), so that both
// parse and relay the same way. It joins stdin and stdout to the init's
// control socket until either side is done or ctx ends, and returns the
// exit code: 0, 1 when the init cannot be reached, 2 for a bad command
// line. name (the command as run) prefixes what it writes to stderr.
func Ctl(ctx context.Context, name string, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	runDir := getenv("SBX_RUN_DIR")
	if runDir == "" {
		runDir = "/run/sbx"
	}
	fs.StringVar(&runDir, "run-dir", runDir, "the init's run directory, which holds its control socket")
	socket := fs.String("socket", "", "the init's control socket (default <run-dir>/init.sock)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected arguments %q\n", name, fs.Args())
		return 2
	}
	s := *socket
	if s == "" {
		s = SocketPath(runDir)
	}
	if err := Relay(ctx, s, stdin, stdout); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	return 0
}

// Relay joins in and out (the SSH channel) to the init's control socket:
// it returns once the init's side is done, or when ctx ends.
func Relay(ctx context.Context, socket string, in io.Reader, out io.Writer) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return fmt.Errorf("reach the init: %w", err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	// Not waited for: a caller's stdin may never end (the process exits
	// after Relay), and a closed socket fails its next write.
	go func() {
		_, _ = io.Copy(c, in)
		if uc, ok := c.(*net.UnixConn); ok {
			_ = uc.CloseWrite()
		}
	}()
	_, err = io.Copy(out, c)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}
