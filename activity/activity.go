// Package activity records when sandboxes are in use, so the idle detector
// can offload the ones nobody uses, and carries wake notifications between
// processes.
//
// Writers (the SSH broker, the preview proxy, control's exec and files
// calls) call Mark on traffic and Open for every open connection. Marks are
// coalesced in memory per sandbox and flushed in batches, so the backing
// store's load grows with the number of active sandboxes, not with
// requests or bytes. Open connections are kept alive by heartbeats that
// expire, so a crashed process never pins a sandbox awake.
//
// Implementations: activity/redisstore (production, shared by every
// replica) and activity/memstore (one process, `sbx dev`). Both pass the
// activity/activitytest conformance suite.
package activity

import (
	"context"
	"errors"
	"time"
)

// Status is what the store knows about one sandbox.
type Status struct {
	// LastSeen is the last mark any process flushed (or this process holds
	// unflushed). Zero: no mark recorded.
	LastSeen time.Time
	// Live reports an open connection whose heartbeat has not lapsed.
	Live bool
	// Epoch names the record LastSeen and Live were read from, and
	// EpochStart is when that record began. A store starts a new epoch
	// whenever records may have been lost: Redis restarted empty, flushed,
	// or failed over to a replica that missed writes; marks dropped while
	// Redis was unreachable; a new process for the in-memory store. Nothing
	// is known about activity before EpochStart, so no sandbox counts as
	// idle since earlier than that: missing data reads as "unknown", never
	// as "idle". Every sandbox read in one Status call has the same epoch.
	Epoch      string
	EpochStart time.Time
}

// Store is the extension point with two implementations. Mark and Open
// never block on the network and never fail: serving goes on whatever the
// store's backend does.
type Store interface {
	// Mark records that sandboxID was used now.
	Mark(sandboxID string)
	// Open records an open connection to sandboxID until close is called.
	// close is idempotent.
	Open(sandboxID string) (close func())
	// Status reads the given sandboxes. An error means the store could not
	// read; callers must then act as if every sandbox were busy.
	Status(ctx context.Context, ids []string) (map[string]Status, error)
	// Flush pushes pending marks and heartbeats now. The background loop
	// does this every flush interval; tests and shutdown call it directly.
	Flush(ctx context.Context) error

	// Publish tells subscribers in every process that sandboxID changed
	// state (woke, suspended, ended).
	Publish(ctx context.Context, sandboxID string) error
	// Subscribe returns a channel that receives after every Publish for
	// sandboxID from then on. Deliveries coalesce: the channel has room for
	// one, and a subscriber re-reads state on each receive. cancel frees it.
	Subscribe(sandboxID string) (ch <-chan struct{}, cancel func())

	// Close stops background work, flushes what it can and releases this
	// process's open connections.
	Close() error
}

// ErrClosed is returned by calls on a closed store.
var ErrClosed = errors.New("activity store closed")
