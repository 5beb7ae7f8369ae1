package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// readyTimeout bounds how long a new server may take to answer.
const readyTimeout = 15 * time.Second

var errProbeDone = errors.New("host key checked")

// waitReady returns once addr accepts TCP and completes an SSH key
// exchange presenting want as host key, or fails when died closes, ctx
// ends or readyTimeout passes.
func waitReady(ctx context.Context, addr string, want gossh.PublicKey, died <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	var last error
	for {
		last = probe(ctx, addr, want)
		if last == nil {
			return nil
		}
		select {
		case <-died:
			return fmt.Errorf("ssh server on %s exited before it was ready (last probe: %v)", addr, last)
		case <-ctx.Done():
			return fmt.Errorf("ssh server on %s not ready: %w (last probe: %v)", addr, ctx.Err(), last)
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// probe runs the key exchange and stops at the host key check: we hold no
// client credential, and the host key is what proves it is our server.
func probe(ctx context.Context, addr string, want gossh.PublicKey) error {
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	nc, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(2 * time.Second))
	var result error = errors.New("no host key presented")
	cfg := &gossh.ClientConfig{
		User: "readiness-probe",
		HostKeyCallback: func(_ string, _ net.Addr, got gossh.PublicKey) error {
			if bytes.Equal(got.Marshal(), want.Marshal()) {
				result = nil
			} else {
				result = fmt.Errorf("host key %s, want %s", gossh.FingerprintSHA256(got), gossh.FingerprintSHA256(want))
			}
			return errProbeDone
		},
		HostKeyAlgorithms: hostKeyAlgorithms(want),
	}
	if _, _, _, err := gossh.NewClientConn(nc, addr, cfg); err != nil && result != nil && !errors.Is(err, errProbeDone) {
		return fmt.Errorf("%w: %w", result, err)
	}
	return result
}

// hostKeyAlgorithms asks for want's algorithm, so a server with several
// host keys shows the one we check.
func hostKeyAlgorithms(want gossh.PublicKey) []string {
	if want.Type() == gossh.KeyAlgoRSA {
		return []string{gossh.KeyAlgoRSASHA512, gossh.KeyAlgoRSASHA256}
	}
	return []string{want.Type()}
}
