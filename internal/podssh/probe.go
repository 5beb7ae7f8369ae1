package podssh

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"golang.org/x/crypto/ssh"
)

var errProbeDone = errors.New("host key checked")

// ProbeHostKey runs an SSH key exchange with addr and stops at the host key
// check: it holds no client credential, and the host key is what proves the
// server is the sandbox's own. Providers use it as their readiness check.
func ProbeHostKey(ctx context.Context, addr string, want ssh.PublicKey) error {
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
	cfg := &ssh.ClientConfig{
		User: "readiness-probe",
		HostKeyCallback: func(_ string, _ net.Addr, got ssh.PublicKey) error {
			if bytes.Equal(got.Marshal(), want.Marshal()) {
				result = nil
			} else {
				result = fmt.Errorf("host key %s, want %s", ssh.FingerprintSHA256(got), ssh.FingerprintSHA256(want))
			}
			return errProbeDone
		},
		HostKeyAlgorithms: hostKeyAlgorithms(want),
	}
	if _, _, _, err := ssh.NewClientConn(nc, addr, cfg); err != nil && result != nil && !errors.Is(err, errProbeDone) {
		return fmt.Errorf("%w: %w", result, err)
	}
	return result
}
