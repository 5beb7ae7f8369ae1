package lifecycle

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/textproto"
	"net/url"
	"regexp"
	"strings"

	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/edgeapi"
)

// CredentialRequest is POST /credentials: a secret the egress gateway
// adds as Header to requests a sandbox sends to Upstream through its
// credential route. The secret is write-only.
type CredentialRequest struct {
	Name     string `json:"name"`
	Upstream string `json:"upstream"`
	Header   string `json:"header"`
	Secret   string `json:"secret"`
}

// credentialNameRE: the name becomes part of an environment variable
// (SBX_CREDENTIAL_<NAME>_URL) and of a URL path.
var credentialNameRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)

// maxCredentialSecret bounds a secret: an API key, not a file.
const maxCredentialSecret = 8 << 10

func validateCredential(r CredentialRequest) error {
	if !credentialNameRE.MatchString(r.Name) {
		return invalid("name", "must be 1 to 32 lower-case letters, digits or '_', starting with a letter")
	}
	u, err := url.Parse(r.Upstream)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return invalid("upstream", "must be an https:// URL with a host and no user, query or fragment")
	}
	if r.Header == "" || textproto.CanonicalMIMEHeaderKey(r.Header) == "" || strings.ContainsAny(r.Header, " :\r\n\t") {
		return invalid("header", "must be an HTTP header name")
	}
	if r.Secret == "" || len(r.Secret) > maxCredentialSecret || strings.ContainsAny(r.Secret, "\r\n\x00") {
		return invalid("secret", "must be 1 to %d bytes without line breaks", maxCredentialSecret)
	}
	return nil
}

// PutCredential stores a credential, sealed, replacing one of the same
// name. A plain-HTTP upstream is accepted here and reached only if the
// gateway trusts its address (--egress-trust).
func (m *Manager) PutCredential(ctx context.Context, acct store.Account, r CredentialRequest) (store.Credential, error) {
	if err := validateCredential(r); err != nil {
		return store.Credential{}, err
	}
	sealed, err := m.sealCredential(acct.ID, r.Name, r.Secret)
	if err != nil {
		return store.Credential{}, err
	}
	c := store.Credential{AccountID: acct.ID, Name: r.Name, Upstream: strings.TrimSuffix(r.Upstream, "/"), Header: r.Header, Sealed: sealed, CreatedAt: m.now().UTC()}
	if err := m.store.InTx(ctx, func(tx store.Tx) error { return tx.PutCredential(ctx, c) }); err != nil {
		return store.Credential{}, fmt.Errorf("put credential %s: %w", r.Name, err)
	}
	return m.store.Credential(ctx, acct.ID, r.Name)
}

// DeleteCredential removes a credential; the gateway asks control on
// every use, so the route stops working at once.
func (m *Manager) DeleteCredential(ctx context.Context, acct store.Account, name string) error {
	err := m.store.InTx(ctx, func(tx store.Tx) error { return tx.DeleteCredential(ctx, acct.ID, name) })
	if errors.Is(err, store.ErrNotFound) {
		return ErrNotFound
	}
	return err
}

// validateCredentialNames checks a create's credential names exist.
func (m *Manager) validateCredentialNames(ctx context.Context, accountID string, names []string) error {
	seen := map[string]bool{}
	for i, n := range names {
		field := fmt.Sprintf("credentials[%d]", i)
		if seen[n] {
			return invalid(field, "%q is given twice", n)
		}
		seen[n] = true
		_, err := m.store.Credential(ctx, accountID, n)
		if errors.Is(err, store.ErrNotFound) {
			return invalid(field, "%q is not one of the account's credentials (POST /api/v1/credentials)", n)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// CredentialRoute is what the gateway needs to forward one request.
type CredentialRoute struct {
	Upstream, Header, Secret string
}

// ErrCredentialRoute is a route the sandbox may not use now: not one it
// was created with, or deleted since. It reads like ErrProxyCredential
// on purpose: the gateway answers both with 403.
var ErrCredentialRoute = errors.New("credential route not available")

// CredentialRoute checks a sandbox's proxy credential and returns the
// named route's upstream, header and secret, and stamps its use.
func (m *Manager) CredentialRoute(ctx context.Context, sandboxID, proxySecret, name string) (CredentialRoute, error) {
	if _, err := m.EgressPolicy(ctx, sandboxID, proxySecret); err != nil {
		return CredentialRoute{}, err
	}
	sb, err := m.store.Sandbox(ctx, sandboxID)
	if err != nil {
		return CredentialRoute{}, fmt.Errorf("credential route of %s: %w", sandboxID, err)
	}
	listed := false
	for _, n := range sb.Credentials {
		listed = listed || subtle.ConstantTimeCompare([]byte(n), []byte(name)) == 1
	}
	if !listed {
		return CredentialRoute{}, ErrCredentialRoute
	}
	c, err := m.store.Credential(ctx, sb.AccountID, name)
	if errors.Is(err, store.ErrNotFound) {
		return CredentialRoute{}, ErrCredentialRoute
	}
	if err != nil {
		return CredentialRoute{}, fmt.Errorf("credential route %s: %w", name, err)
	}
	secret, err := m.openCredential(sb.AccountID, name, c.Sealed)
	if err != nil {
		return CredentialRoute{}, err
	}
	if err := m.store.InTx(ctx, func(tx store.Tx) error { return tx.TouchCredential(ctx, sb.AccountID, name, m.now().UTC()) }); err != nil {
		m.log.WarnContext(ctx, "stamp a credential's use", "credential", name, "err", err)
	}
	return CredentialRoute{Upstream: c.Upstream, Header: c.Header, Secret: secret}, nil
}

// credentialPath is the gateway's route for a sandbox's credential: the
// sandbox's proxy credential is in it, so the URL works with any client
// that takes a base URL, and only for this sandbox.
func (m *Manager) credentialURL(sandboxID, name string) (string, error) {
	secret, err := m.ProxyCredential(sandboxID)
	if err != nil {
		return "", err
	}
	return "http://" + m.cfg.EgressProxy + edgeapi.CredentialPathPrefix + sandboxID + "/" + secret + "/" + name, nil
}

// credentialEnv is SBX_CREDENTIAL_<NAME>_URL for each of the sandbox's
// credential routes.
func (m *Manager) credentialEnv(sb store.Sandbox) ([]string, error) {
	if m.cfg.EgressProxy == "" {
		return nil, nil
	}
	var env []string
	for _, n := range sb.Credentials {
		u, err := m.credentialURL(sb.ID, n)
		if err != nil {
			return nil, err
		}
		env = append(env, "SBX_CREDENTIAL_"+strings.ToUpper(n)+"_URL="+u)
	}
	return env, nil
}

// credentialAEAD seals credential secrets with a key derived from
// control's derivation secret: the database alone yields no secret.
func (m *Manager) credentialAEAD() (cipher.AEAD, error) {
	key, err := m.hostKeys.Bytes("sbx credential seal v1", 32)
	if err != nil {
		return nil, fmt.Errorf("derive credential key: %w", err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

func (m *Manager) sealCredential(accountID, name, secret string) ([]byte, error) {
	aead, err := m.credentialAEAD()
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return aead.Seal(nonce, nonce, []byte(secret), []byte(accountID+"/"+name)), nil
}

func (m *Manager) openCredential(accountID, name string, sealed []byte) (string, error) {
	aead, err := m.credentialAEAD()
	if err != nil {
		return "", err
	}
	if len(sealed) < aead.NonceSize() {
		return "", errors.New("credential: sealed secret too short")
	}
	n := aead.NonceSize()
	plain, err := aead.Open(nil, sealed[:n], sealed[n:], []byte(accountID+"/"+name))
	if err != nil {
		return "", fmt.Errorf("credential %s: cannot open its secret: %w", name, err)
	}
	return string(plain), nil
}
