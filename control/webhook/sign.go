package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The Standard Webhooks scheme (https://www.standardwebhooks.com): the
// signature is HMAC-SHA256, keyed with the secret's bytes, of
// "<webhook-id>.<webhook-timestamp>.<body>", sent base64-encoded as
// "v1,<signature>" in webhook-signature. The secret is shown to the
// account once as "whsec_" and its base64.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"

	secretPrefix = "whsec_"
)

// EncodeSecret is how a signing key is shown: "whsec_" and its base64.
func EncodeSecret(key []byte) string {
	return secretPrefix + base64.StdEncoding.EncodeToString(key)
}

// DecodeSecret reads a secret EncodeSecret wrote.
func DecodeSecret(s string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, secretPrefix))
	if err != nil {
		return nil, fmt.Errorf("webhook secret is not whsec_ and base64: %w", err)
	}
	return key, nil
}

// Sign returns the webhook-signature value for one message.
func Sign(key []byte, msgID string, at time.Time, body []byte) string {
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%d.", msgID, at.Unix())
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// Verify errors.
var (
	ErrBadSignature = errors.New("no webhook signature matches")
	ErrStale        = errors.New("webhook timestamp is too far from now")
)

// Verify is what a receiver does, as the README shows it: recompute the
// signature over the id, the timestamp and the raw body, compare in
// constant time with each v1 signature sent (there may be several while
// a secret rotates), and refuse a timestamp more than tolerance from now
// (a replay).
func Verify(secret, msgID, timestamp, signatures string, body []byte, now time.Time, tolerance time.Duration) error {
	key, err := DecodeSecret(secret)
	if err != nil {
		return err
	}
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return fmt.Errorf("webhook timestamp %q: %w", timestamp, err)
	}
	if d := now.Sub(time.Unix(ts, 0)); d > tolerance || d < -tolerance {
		return ErrStale
	}
	want := Sign(key, msgID, time.Unix(ts, 0), body)
	for sig := range strings.FieldsSeq(signatures) {
		if hmac.Equal([]byte(sig), []byte(want)) {
			return nil
		}
	}
	return ErrBadSignature
}
