package sshbroker

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sbxedge/sbx/auth/sshca"
	"golang.org/x/crypto/ssh"
)

// hostKeyGlob matches the broker's private host key files, named like
// OpenSSH's (ssh_host_ed25519_key, ssh_host_rsa_key, ...).
const hostKeyGlob = "ssh_host_*_key"

// LoadOrCreateHostKeys loads every ssh_host_*_key in dir, and generates
// ssh_host_ed25519_key (mode 0600) when there is none, so the first start
// of a fresh deployment works and later starts keep the same identity.
// Replicas share dir (a mounted secret) so clients see one host key.
func LoadOrCreateHostKeys(dir string) ([]ssh.Signer, error) {
	paths, err := filepath.Glob(filepath.Join(dir, hostKeyGlob))
	if err != nil {
		return nil, fmt.Errorf("list host keys in %s: %w", dir, err)
	}
	sort.Strings(paths)
	var signers []ssh.Signer
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read host key: %w", err)
		}
		s, err := ssh.ParsePrivateKey(b)
		if err != nil {
			return nil, fmt.Errorf("parse host key %s: %w", p, err)
		}
		signers = append(signers, s)
	}
	if len(signers) > 0 {
		return signers, nil
	}
	pemBytes, signer, err := sshca.GenerateKey()
	if err != nil {
		return nil, fmt.Errorf("generate host key: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create host key dir: %w", err)
	}
	p := filepath.Join(dir, "ssh_host_ed25519_key")
	// O_EXCL: two replicas starting on an empty shared dir must not
	// overwrite each other's key; the loser reads the winner's.
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return LoadOrCreateHostKeys(dir)
	}
	if err != nil {
		return nil, fmt.Errorf("create host key: %w", err)
	}
	if _, err := f.Write(pemBytes); err != nil {
		f.Close()
		return nil, fmt.Errorf("write host key: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("write host key: %w", err)
	}
	pub := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey())))
	if err := os.WriteFile(p+".pub", []byte(pub+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("write host public key: %w", err)
	}
	return []ssh.Signer{signer}, nil
}
