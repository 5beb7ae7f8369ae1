// Package token mints and recognises bearer credentials. A token is a kind
// prefix and 32 random bytes in unpadded URL-safe base64; only its
// SHA-256 is stored, and comparisons go through the hash so they take the
// same time whatever the input.
package token

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
)

// Kind prefixes. The prefix lets secret scanners find leaked tokens and
// lets the API refuse a project token with a clear message.
const (
	PrefixAgent   = "sbx_at_"
	PrefixProject = "sbx_pt_"
	PrefixGrant   = "sbx_gt_"
	// PrefixProxy is a sandbox's egress proxy credential.
	PrefixProxy = "sbx_px_"
	// PrefixShare is a share link's secret.
	PrefixShare = "sbx_sh_"
)

// secretLen is the length of the encoded random part (32 bytes).
var secretLen = base64.RawURLEncoding.EncodedLen(32)

// ErrMalformed is returned for strings that cannot be a token.
var ErrMalformed = errors.New("malformed token")

// New returns a fresh token with prefix and its hash.
func New(prefix string) (secret string, hash []byte) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("crypto/rand failed: " + err.Error()) // never happens on Linux
	}
	return FromBytes(prefix, b)
}

// FromBytes returns the token with prefix whose random part is b, and its
// hash. b must be secret and uniformly random (crypto/rand, or a key
// derivation from a secret).
func FromBytes(prefix string, b [32]byte) (secret string, hash []byte) {
	secret = prefix + base64.RawURLEncoding.EncodeToString(b[:])
	return secret, Hash(secret)
}

// Hash is the stored form of a token.
func Hash(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// Parse checks a token's shape and returns its prefix. It does not say
// whether the token is valid; only the store knows that.
func Parse(s string) (prefix string, err error) {
	for _, p := range []string{PrefixAgent, PrefixProject, PrefixGrant, PrefixProxy, PrefixShare} {
		rest, ok := strings.CutPrefix(s, p)
		if !ok {
			continue
		}
		if len(rest) != secretLen {
			return "", ErrMalformed
		}
		if _, err := base64.RawURLEncoding.DecodeString(rest); err != nil {
			return "", ErrMalformed
		}
		return p, nil
	}
	return "", ErrMalformed
}
