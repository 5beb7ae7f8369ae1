// Package hostkey derives each sandbox's SSH host key from one secret.
//
// Control pins a sandbox's host key in its database, and the provider must
// install the private half in the pod. Deriving the key (HKDF over the
// sandbox ID) instead of generating and storing it means a provisioning job
// retried after a crash, a restore after suspend, or a provider that lost
// its copy all get the same key back, and the private key is never written
// to the database.
package hostkey

import (
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/crypto/ssh"
)

// Deriver turns a sandbox ID into its host key.
type Deriver struct {
	secret []byte
}

// New returns a Deriver; secret must be at least 32 bytes.
func New(secret []byte) (*Deriver, error) {
	if len(secret) < 32 {
		return nil, errors.New("host key secret must be at least 32 bytes")
	}
	return &Deriver{secret: secret}, nil
}

// LoadOrCreate reads the secret at path, creating 32 random bytes (mode
// 0600) when the file is missing.
func LoadOrCreate(path string) (*Deriver, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		b = make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("create host key secret dir: %w", err)
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return nil, fmt.Errorf("write host key secret: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("read host key secret: %w", err)
	}
	return New(b)
}

// Bytes derives n bytes for another per-sandbox secret from the same
// secret, for the same reason host keys are derived: every retry, restore
// or restart gets the same value back without it being stored. info
// separates the purposes and must name the purpose, its version and the
// object (e.g. "sbx grant token v1 <grant id>"); host keys use
// "sbx sandbox host key v1 <sandbox id>".
func (d *Deriver) Bytes(info string, n int) ([]byte, error) {
	b, err := hkdf.Key(sha256.New, d.secret, nil, info, n)
	if err != nil {
		return nil, fmt.Errorf("derive %q: %w", info, err)
	}
	return b, nil
}

// Key returns the sandbox's private host key as OpenSSH PEM and its public
// key in authorized_keys form (no trailing newline).
func (d *Deriver) Key(sandboxID string) (privatePEM []byte, public string, err error) {
	seed, err := d.Bytes("sbx sandbox host key v1 "+sandboxID, ed25519.SeedSize)
	if err != nil {
		return nil, "", fmt.Errorf("derive host key for %s: %w", sandboxID, err)
	}
	priv := ed25519.NewKeyFromSeed(seed)
	block, err := ssh.MarshalPrivateKey(priv, "sandbox "+sandboxID)
	if err != nil {
		return nil, "", fmt.Errorf("marshal host key for %s: %w", sandboxID, err)
	}
	pub, err := ssh.NewPublicKey(priv.Public())
	if err != nil {
		return nil, "", err
	}
	authorized := ssh.MarshalAuthorizedKey(pub)
	return pem.EncodeToMemory(block), string(authorized[:len(authorized)-1]), nil
}
