package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/crypto/ssh"
)

// The broker and the preview proxy under test each run as a child
// process of this binary (so their CPU time and memory are their own):
// the parent writes the CA key and a JSON file to a directory, starts
// the child, and reads its address from the child's first stdout line;
// closing the child's stdin stops it.

// readChildInput reads the CA key in dir and decodes dir/file into v.
func readChildInput(dir, file string, v any) (ssh.Signer, error) {
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca_key"))
	if err != nil {
		return nil, err
	}
	caSigner, err := ssh.ParsePrivateKey(caPEM)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return nil, err
	}
	return caSigner, nil
}

// serveChild serves on a loopback listener, prints its address on
// stdout, and when ctx ends or stdin closes (the parent exited or is
// done) calls stop and waits for serve. closed says which of serve's
// errors mean "stopped".
func serveChild(ctx context.Context, serve func(net.Listener) error, stop func() error, closed func(error) bool) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- serve(ln) }()
	fmt.Println(ln.Addr().String())
	waitParent(ctx)
	_ = stop()
	if err := <-served; err != nil && !closed(err) {
		return err
	}
	return nil
}

// waitParent returns when ctx ends or stdin closes (the parent exited
// or is done). The goroutine reading stdin ends with the process.
func waitParent(ctx context.Context) {
	stdinClosed := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(stdinClosed) }()
	select {
	case <-ctx.Done():
	case <-stdinClosed:
	}
}

// startChild runs this binary with args and returns the address it
// reports. Closing stdin and waiting for cmd stops it; startChild does
// that itself when the child reports no address.
func startChild(what string, args ...string) (cmd *exec.Cmd, stdin io.WriteCloser, addr string, err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, "", err
	}
	return startChildOf(self, what, args...)
}

// startChildOf is startChild with another loadtest binary (one built
// from another commit, for a before/after column in one run).
func startChildOf(bin, what string, args ...string) (cmd *exec.Cmd, stdin io.WriteCloser, addr string, err error) {
	cmd = exec.Command(bin, args...)
	cmd.Stderr = os.Stderr
	stdin, err = cmd.StdinPipe()
	if err != nil {
		return nil, nil, "", err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, "", fmt.Errorf("start %s: %w", what, err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		stdin.Close()
		_ = cmd.Wait()
		return nil, nil, "", fmt.Errorf("%s did not report its address: %w", what, err)
	}
	return cmd, stdin, strings.TrimSpace(line), nil
}
