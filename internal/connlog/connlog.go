// Package connlog is the connection log's vocabulary, shared by the edge
// (which reports SSH sessions and preview connections) and control (which
// records its own streams and stores every report): what a connection
// record holds, the kinds of connection, and the rules that name the
// client from what it already tells us (see clientkind.go).
package connlog

import (
	"slices"
	"time"
)

// Kind is what surface a connection came through. Gauges are labelled by
// it, so the set is small and fixed.
type Kind string

// Connection kinds.
const (
	KindSSH      Kind = "ssh"      // one SSH connection through the broker
	KindPreview  Kind = "preview"  // one browser (or API) session on a preview host
	KindTerminal Kind = "terminal" // one PTY stream from the API
	KindExec     Kind = "exec"     // one exec stream from the API
	KindMCP      Kind = "mcp"      // one MCP session
)

// Kinds lists every Kind, for gauges that report zero too.
var Kinds = []Kind{KindSSH, KindPreview, KindTerminal, KindExec, KindMCP}

// Channel kinds an SSH connection may carry.
const (
	ChannelShell       = "shell"
	ChannelExec        = "exec"
	ChannelSFTP        = "sftp"
	ChannelPortForward = "port_forward"
	ChannelSession     = "session" // a session channel that has not said what it runs yet
)

// End reasons the reporters use; others are free text from the surface
// (an authority revocation's reason, say).
const (
	EndClosed   = "closed"    // the client or the sandbox closed it
	EndShutdown = "shutdown"  // the reporter shut down
	EndEdgeLost = "edge_lost" // its reporter stopped renewing the lease
	EndIdle     = "idle"      // a session (MCP) saw no request for its idle period
)

// Record is one connection as the log keeps it. Credential names the
// credential (a token or SSH credential ID, an OIDC subject), never the
// secret.
type Record struct {
	ID         string `json:"id"`
	SandboxID  string `json:"sandbox_id"`
	Kind       Kind   `json:"kind"`
	Credential string `json:"credential,omitempty"`
	ClientAddr string `json:"client_addr,omitempty"`
	ClientKind string `json:"client_kind"`
	// ClientDetail is what the kind was told from (a version string, a
	// user agent, clientInfo), cut to MaxDetail bytes.
	ClientDetail string     `json:"client_detail,omitempty"`
	Channels     []string   `json:"channels,omitempty"`
	StartedAt    time.Time  `json:"started_at"`
	EndedAt      *time.Time `json:"ended_at,omitempty"`
	BytesIn      int64      `json:"bytes_in"`  // client to sandbox
	BytesOut     int64      `json:"bytes_out"` // sandbox to client
	EndReason    string     `json:"end_reason,omitempty"`
}

// MaxDetail bounds ClientDetail and other client-chosen strings.
const MaxDetail = 200

// Cut bounds a client-chosen string to n bytes.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// AddChannel adds kind to channels once, keeping them sorted.
func AddChannel(channels []string, kind string) []string {
	if i, found := slices.BinarySearch(channels, kind); !found {
		channels = slices.Insert(channels, i, kind)
	}
	return channels
}
