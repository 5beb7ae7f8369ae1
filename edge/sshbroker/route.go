// Package sshbroker is the edge's multi-tenant SSH broker. Stock OpenSSH
// clients authenticate to it with a per-sandbox key; it opens one upstream
// SSH connection to that sandbox's sshd per client connection, using a
// CA-signed certificate and the sandbox's pinned host key, and relays
// channels and requests in both directions with SSH flow control end to end.
//
// Agent forwarding (ssh -A) is relayed, not refused: the broker never reads
// the agent itself, and upstream auth-agent@openssh.com channels reach only
// the client connection that asked for forwarding, because every client
// connection has its own upstream connection. X11 forwarding is refused.
package sshbroker

import (
	"context"
	"time"

	"github.com/sbxedge/sbx/internal/edgeapi"
)

// Route is where an authenticated credential leads.
type Route struct {
	// SandboxID names the sandbox, for logs, limits and activity.
	SandboxID string
	// Addr is the sandbox sshd's host:port.
	Addr string
	// User is the login name on the sandbox (the certificate principal).
	User string
	// HostKey is the sandbox's pinned host key in authorized_keys form.
	HostKey string
	// ExpiresAt is when the credential stops admitting new connections.
	// Open connections are not cut at expiry.
	ExpiresAt time.Time
}

// Authorizer answers whether a public key fingerprint (SHA256:...) is a live
// credential for the sandbox named by the SSH username. Refusals wrap one of
// the Err* sentinels; any other error is treated as a control-plane fault.
type Authorizer interface {
	Authorize(ctx context.Context, username, fingerprint string) (Route, error)
}

// Refusal reasons an Authorizer reports: control's, declared in
// internal/edgeapi. Only ErrExpired and ErrSandboxEnded are explained to
// the client (and only after it proved it holds the key); the others look
// identical to the client, so probing learns nothing.
var (
	ErrUnknownKey     = edgeapi.ErrSSHUnknownKey
	ErrExpired        = edgeapi.ErrSSHExpired
	ErrSandboxEnded   = edgeapi.ErrSSHSandboxEnded
	ErrWrongSandbox   = edgeapi.ErrSSHWrongSandbox
	ErrUnknownSandbox = edgeapi.ErrSSHUnknownSandbox
	// ErrNotReady: the credential is good but the sandbox has no running
	// server to relay to (pending, suspended, restoring).
	ErrNotReady = edgeapi.ErrSSHNotReady
)

// Activity is told when a sandbox is in use. Mark is called on relayed
// bytes (at most about once a second per connection); Open is called once
// per client connection and its close func when the connection ends.
// Implementations must be safe for concurrent use and must not block.
type Activity interface {
	Mark(sandboxID string)
	Open(sandboxID string) (close func())
}

type nopActivity struct{}

func (nopActivity) Mark(string)                {}
func (nopActivity) Open(string) (close func()) { return func() {} }

// maxUsernameLen bounds a username that can name a sandbox.
const maxUsernameLen = 128

// validUsername rejects usernames that cannot name a sandbox before the
// Authorizer (and its cache and logs) ever sees them.
func validUsername(u string) bool {
	if u == "" || len(u) > maxUsernameLen {
		return false
	}
	for i := 0; i < len(u); i++ {
		c := u[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '-' || c == '_' || c == '.':
		default:
			return false
		}
	}
	return true
}
