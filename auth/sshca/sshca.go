// Package sshca is the internal SSH certificate authority. Sandboxes trust
// its public key (TrustedUserCAKeys); control and edge present short-lived
// user certificates it signs, so no per-sandbox secret is ever shared.
package sshca

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/crypto/ssh"
)

// CA signs user certificates.
type CA struct {
	signer ssh.Signer
}

// New wraps an existing signer.
func New(signer ssh.Signer) *CA { return &CA{signer: signer} }

// Generate makes a CA with a fresh ed25519 key (tests, first start).
func Generate() (*CA, []byte, error) {
	pemBytes, signer, err := GenerateKey()
	if err != nil {
		return nil, nil, err
	}
	return New(signer), pemBytes, nil
}

// LoadOrCreate reads the CA key at path, creating it (mode 0600) when
// missing, so a restarted `sbx dev` keeps trusting its sandboxes.
func LoadOrCreate(path string) (*CA, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		ca, pemBytes, err := Generate()
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("create CA key dir: %w", err)
		}
		if err := os.WriteFile(path, pemBytes, 0o600); err != nil {
			return nil, fmt.Errorf("write CA key: %w", err)
		}
		return ca, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read CA key: %w", err)
	}
	return parse(path, b)
}

// Load reads the CA key at path (OpenSSH PEM), which must exist: the edge
// signs with the key control made, mounted from the same Secret.
func Load(path string) (*CA, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read CA key: %w", err)
	}
	return parse(path, b)
}

func parse(path string, pemBytes []byte) (*CA, error) {
	signer, err := ssh.ParsePrivateKey(pemBytes)
	if err != nil {
		return nil, fmt.Errorf("parse CA key %s: %w", path, err)
	}
	return New(signer), nil
}

// PublicKey returns the CA public key.
func (c *CA) PublicKey() ssh.PublicKey { return c.signer.PublicKey() }

// AuthorizedKey returns the CA public key in authorized_keys form, as
// TrustedUserCAKeys expects.
func (c *CA) AuthorizedKey() string {
	return string(ssh.MarshalAuthorizedKey(c.signer.PublicKey()))
}

// UserSigner returns a signer holding a fresh ephemeral key and a
// certificate for principal valid for ttl. keyID names the holder in the
// sandbox's sshd logs (e.g. "control" or "edge:conn-42").
func (c *CA) UserSigner(principal, keyID string, ttl time.Duration) (ssh.Signer, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate user key: %w", err)
	}
	key, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	cert := &ssh.Certificate{
		Key:             key.PublicKey(),
		CertType:        ssh.UserCert,
		KeyId:           keyID,
		ValidPrincipals: []string{principal},
		// Backdate a little: pod clocks may lag ours.
		ValidAfter:  uint64(now.Add(-time.Minute).Unix()),
		ValidBefore: uint64(now.Add(ttl).Unix()),
		Permissions: ssh.Permissions{Extensions: map[string]string{
			"permit-pty":              "",
			"permit-port-forwarding":  "",
			"permit-agent-forwarding": "",
			"permit-X11-forwarding":   "",
			"permit-user-rc":          "",
		}},
	}
	if err := cert.SignCert(rand.Reader, c.signer); err != nil {
		return nil, fmt.Errorf("sign user certificate: %w", err)
	}
	return ssh.NewCertSigner(cert, key)
}

// GenerateKey makes an ed25519 key and returns it as OpenSSH PEM and as a
// signer. Control uses it for CA and per-sandbox host keys.
func GenerateKey() ([]byte, ssh.Signer, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate ed25519 key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		return nil, nil, fmt.Errorf("marshal key: %w", err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(block), signer, nil
}
