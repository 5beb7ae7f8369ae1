package preview

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"time"
)

// Cookie names. The __Host- prefix makes browsers insist on Secure, Path=/
// and no Domain attribute, so the cookie is bound to exactly the host that
// set it: a sibling preview (same site, different host) can neither read
// nor overwrite it.
const (
	sessionCookie = "__Host-sbx-preview"
	loginCookie   = "__Host-sbx-login"
	// cookiePrefix marks every cookie of ours; all are stripped upstream.
	cookiePrefix = "__Host-sbx-"
)

// Purposes keep one sealed value from being replayed as another kind.
const (
	purposeSession = "session"
	purposeTicket  = "ticket"
	purposeLogin   = "login"
)

var errBadSeal = errors.New("invalid or expired credential")

// sealer signs small JSON payloads with HMAC-SHA256 under a key shared by
// every edge replica, so a cookie set by one replica is good at all.
type sealer struct {
	key []byte
	now func() time.Time
}

// sealed is the common envelope; Exp is unix seconds.
type sealed struct {
	Purpose string `json:"p"`
	Exp     int64  `json:"e"`
}

func (s sealer) seal(purpose string, ttl time.Duration, v any) (string, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	env, err := json.Marshal(struct {
		sealed
		Body json.RawMessage `json:"b"`
	}{sealed{purpose, s.now().Add(ttl).Unix()}, body})
	if err != nil {
		return "", err
	}
	payload := base64.RawURLEncoding.EncodeToString(env)
	return payload + "." + base64.RawURLEncoding.EncodeToString(s.mac(payload)), nil
}

func (s sealer) mac(payload string) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(payload))
	return m.Sum(nil)
}

// open verifies and decodes a sealed value of the given purpose into v.
func (s sealer) open(purpose, value string, v any) error {
	payload, sig, ok := strings.Cut(value, ".")
	if !ok || len(value) > 4096 {
		return errBadSeal
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, s.mac(payload)) {
		return errBadSeal
	}
	raw, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return errBadSeal
	}
	var env struct {
		sealed
		Body json.RawMessage `json:"b"`
	}
	if err := json.Unmarshal(raw, &env); err != nil || env.Purpose != purpose || s.now().Unix() >= env.Exp {
		return errBadSeal
	}
	if err := json.Unmarshal(env.Body, v); err != nil {
		return errBadSeal
	}
	return nil
}

// session is the preview cookie's content: bound to one host label, one
// sandbox and its account. It is checked against the current route on
// every request, so a cookie for sandbox A is worthless on B's host even
// if a browser were tricked into sending it there.
type session struct {
	Label     string `json:"h"`
	SandboxID string `json:"s"`
	AccountID string `json:"a"`
	Subject   string `json:"u"` // issuer#subject of who signed in
	// Email and EmailVerified are the rest of the identity, for checking
	// membership again on later requests.
	Email         string `json:"m,omitempty"`
	EmailVerified bool   `json:"v,omitempty"`
}

// identity is who signed in. Issuers are URLs without a fragment, so the
// first '#' of Subject ends the issuer.
func (s session) identity() Identity {
	iss, sub, _ := strings.Cut(s.Subject, "#")
	return Identity{Issuer: iss, Subject: sub, Email: s.Email, EmailVerified: s.EmailVerified}
}

// ticket carries a session from the login host to the preview host, once.
type ticket struct {
	session
	Path  string `json:"r"` // where to land on the preview host
	Nonce string `json:"n"`
}

// loginState rides in the login cookie across the OIDC round trip.
type loginState struct {
	State    string `json:"s"`
	Nonce    string `json:"n"`
	Verifier string `json:"v"`
	Target   string `json:"t"`
}

func randomString() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
