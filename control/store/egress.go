package store

import "time"

// EgressDecision is one request the egress gateway decided about, in a
// sandbox's egress log. ID orders the log (newest highest) and pages it.
type EgressDecision struct {
	ID        int64
	SandboxID string
	At        time.Time // when the request arrived
	Host      string    // as asked for: a name or an IP literal
	Port      int
	Addr      string // the address dialed; empty when none was
	Verdict   string // allowed, denied or failed
	Reason    string
	BytesUp   int64 // sandbox to destination
	BytesDown int64
}

// Credential is an account's secret for an upstream API, injected by the
// egress gateway as Header on requests to Upstream. Sealed is the secret
// encrypted by control; the store never sees it in the clear.
type Credential struct {
	AccountID  string
	Name       string
	Upstream   string
	Header     string
	Sealed     []byte
	CreatedAt  time.Time
	LastUsedAt *time.Time
}
