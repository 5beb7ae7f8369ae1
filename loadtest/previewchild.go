package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/auth/sshca"
	"github.com/sbxedge/sbx/edge/preview"
	"github.com/sbxedge/sbx/internal/podssh"
)

// previewChildCmd runs the preview proxy in its own process, so its CPU
// time per request can be read from /proc apart from the load
// generator's and the upstream's, as nginx's and Caddy's are.
const previewChildCmd = "_preview-proxy"

// previewChildConfig is what the parent writes to preview.json.
type previewChildConfig struct {
	Route        preview.Route `json:"route"`
	ReverseProxy bool          `json:"reverse_proxy"` // DisableLeanRelay
	IdlePerHost  int           `json:"idle_per_host"`
}

// runPreviewChild serves the proxy on 127.0.0.1, prints its address on
// stdout, and stops when stdin closes.
func runPreviewChild(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet(previewChildCmd, flag.ContinueOnError)
	dir := fs.String("dir", "", "directory with ca_key and the config file")
	file := fs.String("config", "preview.json", "config file in dir")
	if err := fs.Parse(args); err != nil {
		return err
	}
	caPEM, err := os.ReadFile(filepath.Join(*dir, "ca_key"))
	if err != nil {
		return err
	}
	caSigner, err := ssh.ParsePrivateKey(caPEM)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(filepath.Join(*dir, *file))
	if err != nil {
		return err
	}
	var c previewChildConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return err
	}
	pool := podssh.NewPool(sshca.New(caSigner), nil, podssh.WithKeyID("loadtest"))
	defer pool.Close()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	pcfg := preview.DefaultConfig()
	pcfg.Domain, pcfg.Scheme = "preview.localhost", "http"
	pcfg.Resolver = staticRoutes{c.Route}
	pcfg.Pods = pool
	pcfg.Accounts = oneToken{tok: "sbx_at_loadtest", acct: c.Route.AccountID}
	pcfg.SessionKey = key
	pcfg.DevSignIn = &preview.DevSignIn{AccountID: c.Route.AccountID, User: "load"}
	pcfg.MaxRequestsPerHost = 4096
	pcfg.MaxIdleUpstreamPerHost = c.IdlePerHost
	pcfg.DisableLeanRelay = c.ReverseProxy
	px, err := preview.New(ctx, pcfg)
	if err != nil {
		return err
	}
	defer px.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := preview.NewServer(px, slog.New(slog.DiscardHandler), true)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Println(ln.Addr().String())
	stdinClosed := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(stdinClosed) }()
	select {
	case <-ctx.Done():
	case <-stdinClosed:
	}
	_ = srv.Close()
	if err := <-served; err != nil && !errors.Is(err, net.ErrClosed) && err.Error() != "http: Server closed" {
		return err
	}
	return nil
}

// startPreviewChild runs `loadtest _preview-proxy` (this binary) with c
// written to dir, and returns its address, pid and a stop.
func startPreviewChild(dir, name string, c previewChildConfig) (addr string, pid int, stop func(), err error) {
	file := "preview-" + name + ".json"
	b, _ := json.Marshal(c)
	if err := os.WriteFile(filepath.Join(dir, file), b, 0o600); err != nil {
		return "", 0, nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return "", 0, nil, err
	}
	cmd := exec.Command(self, previewChildCmd, "--dir", dir, "--config", file)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", 0, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", 0, nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", 0, nil, fmt.Errorf("start preview proxy: %w", err)
	}
	stop = func() { stdin.Close(); _ = cmd.Wait() }
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		stop()
		return "", 0, nil, fmt.Errorf("preview proxy did not report its address: %w", err)
	}
	return strings.TrimSpace(line), cmd.Process.Pid, stop, nil
}
