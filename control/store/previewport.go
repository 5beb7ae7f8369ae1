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
	SandboxID  string
	AccountID  string
	Port       int
	Label      string
	Access     PortAccess
	HostPolicy HostPolicy
	CreatedAt  time.Time
}
