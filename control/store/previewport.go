package store

import "time"

// PortAccess says who may reach a preview port.
type PortAccess string

const (
	// AccessPrivate admits members of the sandbox's account only.
	AccessPrivate PortAccess = "private"
	// AccessPublic admits anyone who knows the URL.
	AccessPublic PortAccess = "public"
)

// HostPolicy says which Host header the sandbox's server sees.
type HostPolicy string

const (
	// HostForward passes the public preview host through (the default).
	HostForward HostPolicy = "forward"
	// HostLocalhost rewrites Host to localhost:<port>, for dev servers that
	// refuse unknown hosts.
	HostLocalhost HostPolicy = "localhost"
)

// PreviewPort exposes one port inside a sandbox at
// <Label>.preview.<domain>. Label is random and stored, never derived from
// the sandbox ID, so knowing a sandbox ID reveals no preview URL.
type PreviewPort struct {
	SandboxID string
	AccountID string
	Port      int
	Label     string
	// Name is the user's label for the port ("web", "storybook"): a DNS
	// label, unique among the sandbox's ports, shown on the ports list
	// and the edge's pages; empty when none was given. Unlike Label it
	// is chosen, so it never appears in a host name.
	Name       string
	Access     PortAccess
	HostPolicy HostPolicy
	CreatedAt  time.Time
}

// Share is a share link: one exposed port of a sandbox opened to
// whoever holds the link's secret, without signing in, until ExpiresAt or
// RevokedAt. Only the secret's hash is stored.
type Share struct {
	ID        string
	SandboxID string
	AccountID string
	Port      int
	Hash      []byte
	Note      string
	// CreatedBy is the agent token that created it (its ID).
	CreatedBy   string
	CreatedAt   time.Time
	ExpiresAt   time.Time
	FirstUsedAt *time.Time // the first exchange of the secret for a cookie
	RevokedAt   *time.Time
}

// Live reports whether s still opens its port at now.
func (s Share) Live(now time.Time) bool {
	return s.RevokedAt == nil && now.Before(s.ExpiresAt)
}
