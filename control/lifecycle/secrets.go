package lifecycle

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"time"

	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/store"
)

// Account secrets: a value is written once (POST /secrets), stored sealed
// with AES-256-GCM under the operator's key, and leaves control only into
// the sandboxes whose create names it, as an environment variable or a
// file. No read, list, event or log carries a value.

var (
	// ErrSecretsDisabled: the deployment was given no secrets key.
	ErrSecretsDisabled = errors.New("this deployment stores no secrets: control was started without a secrets key (--secrets-key-file)")
	// ErrSecretNotFound: the account has no secret of that name.
	ErrSecretNotFound = errors.New("secret not found")
)

const (
	maxSecretValue = 64 << 10
	maxSecretRefs  = 32
	// SecretDir is where file secrets land, relative to the sandbox
	// user's home: $HOME/.sbx/secrets/NAME, mode 0400.
	SecretDir = ".sbx/secrets"
	// SecretKeySize is the length of the operator's key (AES-256).
	SecretKeySize = 32
)

// ParseSecretsKey reads the operator's key file: 32 bytes as 64 hex
// digits or standard base64 (surrounding white space ignored), or the 32
// raw bytes themselves.
func ParseSecretsKey(b []byte) ([]byte, error) {
	if len(b) == SecretKeySize {
		return bytes.Clone(b), nil
	}
	t := bytes.TrimSpace(b)
	if k, err := hex.DecodeString(string(t)); err == nil && len(k) == SecretKeySize {
		return k, nil
	}
	if k, err := base64.StdEncoding.DecodeString(string(t)); err == nil && len(k) == SecretKeySize {
		return k, nil
	}
	return nil, fmt.Errorf("secrets key: want %d bytes, as 64 hex digits, base64 or raw", SecretKeySize)
}

// NewSecretsKey draws a key in the form ParseSecretsKey reads (hex).
func NewSecretsKey() []byte {
	k := make([]byte, SecretKeySize)
	_, _ = rand.Read(k)
	return []byte(hex.EncodeToString(k) + "\n")
}

func (m *Manager) secretAEAD() (cipher.AEAD, error) {
	if len(m.cfg.SecretsKey) == 0 {
		return nil, ErrSecretsDisabled
	}
	blk, err := aes.NewCipher(m.cfg.SecretsKey)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	return cipher.NewGCM(blk)
}

// secretAAD binds a sealed value to its account and name, so a row
// copied onto another cannot be opened there.
func secretAAD(accountID, name string) []byte {
	return []byte("sbx secret v1\x00" + accountID + "\x00" + name)
}

func (m *Manager) sealSecret(accountID, name string, value []byte) ([]byte, error) {
	aead, err := m.secretAEAD()
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, aead.NonceSize())
	_, _ = rand.Read(nonce)
	return aead.Seal(nonce, nonce, value, secretAAD(accountID, name)), nil
}

func (m *Manager) openSecret(s store.Secret) ([]byte, error) {
	aead, err := m.secretAEAD()
	if err != nil {
		return nil, err
	}
	n := aead.NonceSize()
	if len(s.Sealed) < n {
		return nil, fmt.Errorf("secret %s: sealed value too short", s.Name)
	}
	v, err := aead.Open(nil, s.Sealed[:n], s.Sealed[n:], secretAAD(s.AccountID, s.Name))
	if err != nil {
		// Another key (rotated without re-sealing) or a tampered row.
		return nil, fmt.Errorf("secret %s cannot be opened with this deployment's key: %w", s.Name, err)
	}
	return v, nil
}

// secretNameOK: a secret's name is an environment name (it may be
// delivered as one) and a file name.
func secretNameOK(name string) bool { return envNameRE.MatchString(name) }

// PutSecret stores (or replaces) one of the account's secrets.
func (m *Manager) PutSecret(ctx context.Context, acct store.Account, name, value string) (store.Secret, error) {
	if !secretNameOK(name) {
		return store.Secret{}, invalid("name", "must be 1 to 128 letters, digits or '_', not starting with a digit")
	}
	if value == "" || len(value) > maxSecretValue {
		return store.Secret{}, invalid("value", "must be 1 to %d bytes", maxSecretValue)
	}
	sealed, err := m.sealSecret(acct.ID, name, []byte(value))
	if err != nil {
		return store.Secret{}, err
	}
	now := m.now().UTC().Truncate(time.Microsecond)
	sec := store.Secret{AccountID: acct.ID, Name: name, Sealed: sealed, CreatedAt: now, UpdatedAt: now}
	if err := m.store.InTx(ctx, func(tx store.Tx) error { return tx.PutSecret(ctx, sec) }); err != nil {
		return store.Secret{}, fmt.Errorf("put secret %s: %w", name, err)
	}
	// Read back for the CreatedAt of one it replaced.
	got, err := m.store.Secret(ctx, acct.ID, name)
	if err != nil {
		return store.Secret{}, fmt.Errorf("put secret %s: %w", name, err)
	}
	m.log.InfoContext(ctx, "secret stored", "account_id", acct.ID, "secret", name)
	return got, nil
}

// Secrets lists the account's secrets (the API shows names and times).
func (m *Manager) Secrets(ctx context.Context, acct store.Account) ([]store.Secret, error) {
	list, err := m.store.Secrets(ctx, acct.ID)
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	return list, nil
}

// DeleteSecret removes one of the account's secrets. Sandboxes created
// with it keep what they were given until they are provisioned or
// restored again, which delivers it no more.
func (m *Manager) DeleteSecret(ctx context.Context, acct store.Account, name string) error {
	if !secretNameOK(name) {
		return ErrSecretNotFound
	}
	err := m.store.InTx(ctx, func(tx store.Tx) error { return tx.DeleteSecret(ctx, acct.ID, name) })
	if errors.Is(err, store.ErrNotFound) {
		return ErrSecretNotFound
	}
	if err != nil {
		return fmt.Errorf("delete secret %s: %w", name, err)
	}
	m.log.InfoContext(ctx, "secret deleted", "account_id", acct.ID, "secret", name)
	return nil
}

// validateSecretRefs checks a create's secrets: known names of the
// account, each once, delivered as env or file; one delivered as env
// must be a value an environment can carry and not clash with env.
func (m *Manager) validateSecretRefs(ctx context.Context, accountID string, refs []store.SecretRef, env map[string]string) error {
	if len(refs) == 0 {
		return nil
	}
	if len(refs) > maxSecretRefs {
		return invalid("secrets", "names %d secrets; at most %d are allowed", len(refs), maxSecretRefs)
	}
	if len(m.cfg.SecretsKey) == 0 {
		return ErrSecretsDisabled
	}
	seen := map[string]bool{}
	for i, r := range refs {
		field := fmt.Sprintf("secrets[%d]", i)
		if r.As != "env" && r.As != "file" {
			return invalid(field, `as must be "env" or "file"`)
		}
		if !secretNameOK(r.Name) {
			return invalid(field, "name must be 1 to 128 letters, digits or '_', not starting with a digit")
		}
		if seen[r.Name+"/"+r.As] {
			return invalid(field, "%s is named twice as %s", r.Name, r.As)
		}
		seen[r.Name+"/"+r.As] = true
		sec, err := m.store.Secret(ctx, accountID, r.Name)
		if errors.Is(err, store.ErrNotFound) {
			return invalid(field, "the account has no secret %s (POST /api/v1/secrets stores one)", r.Name)
		}
		if err != nil {
			return fmt.Errorf("look up secret %s: %w", r.Name, err)
		}
		if r.As != "env" {
			continue
		}
		if why, ok := envNameOK(r.Name); !ok {
			return invalid(field, "%s cannot be an environment variable: it %s", r.Name, why)
		}
		if _, clash := env[r.Name]; clash {
			return invalid(field, "%s is also in env", r.Name)
		}
		v, err := m.openSecret(sec)
		if err != nil {
			return err
		}
		if !envValueOK(string(v)) || len(v) > maxEnvValueLen {
			return invalid(field, "%s holds a newline, a control character or more than %d bytes: deliver it as a file", r.Name, maxEnvValueLen)
		}
	}
	return nil
}

// secretDelivery is what a sandbox's secrets add to its spec. A secret
// deleted since the create is delivered no more.
func (m *Manager) secretDelivery(ctx context.Context, sb store.Sandbox) (env []string, files []provider.File, err error) {
	for _, r := range sb.Secrets {
		sec, err := m.store.Secret(ctx, sb.AccountID, r.Name)
		if errors.Is(err, store.ErrNotFound) {
			m.log.WarnContext(ctx, "a secret the sandbox names was deleted; not delivered", "sandbox_id", sb.ID, "secret", r.Name)
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("secret %s of %s: %w", r.Name, sb.ID, err)
		}
		v, err := m.openSecret(sec)
		if err != nil {
			return nil, nil, fmt.Errorf("secret of %s: %w", sb.ID, err)
		}
		switch r.As {
		case "env":
			env = append(env, r.Name+"="+string(v))
		case "file":
			files = append(files, provider.File{Path: path.Join(SecretDir, r.Name), Mode: 0o400, Data: v})
		}
	}
	return env, files, nil
}
