package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"net"
	"os"
	"path/filepath"

	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/internal/podtcp"
)

// forwarderChildCmd runs a sandbox's port forwarder (podtcp) in its own
// process, so its CPU time is read as the sandbox side of the proxy's
// tier, as sshd's is: in a pod it runs in the sandbox's init.
const forwarderChildCmd = "_forwarder"

// forwarderChildConfig is what the parent writes to forwarder.json.
type forwarderChildConfig struct {
	HostKeyPEM string `json:"host_key_pem"`
	Principal  string `json:"principal"`
}

func runForwarderChild(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet(forwarderChildCmd, flag.ContinueOnError)
	dir := fs.String("dir", "", "directory with ca_key and forwarder.json")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var c forwarderChildConfig
	ca, err := readChildInput(*dir, "forwarder.json", &c)
	if err != nil {
		return err
	}
	host, err := ssh.ParsePrivateKey([]byte(c.HostKeyPEM))
	if err != nil {
		return err
	}
	keys := podtcp.Keys{HostKey: host, UserCAs: []ssh.PublicKey{ca.PublicKey()}, Principal: c.Principal}
	f := &podtcp.Forwarder{Keys: func() (podtcp.Keys, error) { return keys, nil }}
	if d := os.Getenv(profileDirEnv); d != "" {
		stop, err := profileTo(d, "forwarder")
		if err != nil {
			return err
		}
		defer stop()
	}
	ctx, cancel := context.WithCancel(ctx)
	return serveChild(ctx, func(ln net.Listener) error { return f.Serve(ctx, ln) },
		func() error { cancel(); return nil }, func(err error) bool { return errors.Is(err, net.ErrClosed) })
}

// startForwarderChild runs `loadtest _forwarder` with c written to dir
// and returns its address, pid and a stop.
func startForwarderChild(dir string, c forwarderChildConfig) (addr string, pid int, stop func(), err error) {
	b, _ := json.Marshal(c)
	if err := os.WriteFile(filepath.Join(dir, "forwarder.json"), b, 0o600); err != nil {
		return "", 0, nil, err
	}
	cmd, stdin, addr, err := startChild("port forwarder", forwarderChildCmd, "--dir", dir)
	if err != nil {
		return "", 0, nil, err
	}
	return addr, cmd.Process.Pid, func() { stdin.Close(); _ = cmd.Wait() }, nil
}
