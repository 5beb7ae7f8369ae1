package store

import (
	"time"

	"github.com/sbxedge/sbx/internal/connlog"
)

// Connection is one row of the connection log: a record as its reporter
// sent it, with the account control filled in from the sandbox.
type Connection struct {
	connlog.Record
	AccountID string
	Reporter  string
	// LeaseUntil is when a live row ends as edge_lost unless renewed; nil
	// once ended.
	LeaseUntil *time.Time
}

// ConnectionFilter selects rows of the log, newest first.
type ConnectionFilter struct {
	AccountID string // required
	SandboxID string // empty: the whole account
	LiveOnly  bool
	// Before is the cursor: only rows older than the one with this ID.
	Before string
	Limit  int // default and ceiling 200
}

// MaxConnectionsPage bounds one page of the log.
const MaxConnectionsPage = 200
