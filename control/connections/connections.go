// Package connections is control's side of the connection log: it checks
// and stores the batches reporters send (the edge through the internal
// API, control's own streams directly), and settles the live connections
// of reporters that stopped renewing their lease (an edge that died).
package connections

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/connlog"
)

// Store is the subset of store.Store the log uses.
type Store interface {
	InTx(ctx context.Context, fn func(store.Tx) error) error
}

// Config configures a Log.
type Config struct {
	// MaxLease caps the lease a reporter asks for, so a connection of a
	// dead edge is settled within MaxLease+SweepEvery. Default 45s: with
	// the default sweep, within the minute the log promises.
	MaxLease time.Duration
	// SweepEvery is how often lapsed leases are settled; default 10s.
	SweepEvery time.Duration
	// MaxBatch bounds the records of one batch; default 500.
	MaxBatch int
	Logger   *slog.Logger
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

// Log stores and settles the connection log. It is safe for concurrent
// use.
type Log struct {
	cfg   Config
	store Store
}

// ErrInvalid wraps a batch the log refuses.
var ErrInvalid = errors.New("invalid connection batch")

// New fills in cfg's defaults.
func New(st Store, cfg Config) *Log {
	if cfg.MaxLease <= 0 {
		cfg.MaxLease = 45 * time.Second
	}
	if cfg.SweepEvery <= 0 {
		cfg.SweepEvery = 10 * time.Second
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 500
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Log{cfg: cfg, store: st}
}

var _ connlog.Sink = (*Log)(nil)

// ReportConnections checks and stores one batch. The lease is capped at
// MaxLease; records name a known kind and a sandbox, and nothing in them
// is longer than the log keeps.
func (l *Log) ReportConnections(ctx context.Context, b connlog.Batch) error {
	if err := l.check(&b); err != nil {
		return err
	}
	now := l.cfg.Now().UTC()
	return l.store.InTx(ctx, func(tx store.Tx) error { return tx.ReportConnections(ctx, b, now) })
}

func (l *Log) check(b *connlog.Batch) error {
	if b.Reporter == "" || len(b.Reporter) > 64 {
		return fmt.Errorf("%w: reporter must be 1 to 64 bytes", ErrInvalid)
	}
	if b.LeaseSeconds <= 0 {
		return fmt.Errorf("%w: lease_seconds must be positive", ErrInvalid)
	}
	if b.Lease() > l.cfg.MaxLease {
		b.LeaseSeconds = l.cfg.MaxLease.Seconds()
	}
	if len(b.Records) > l.cfg.MaxBatch {
		return fmt.Errorf("%w: at most %d records", ErrInvalid, l.cfg.MaxBatch)
	}
	for i := range b.Records {
		r := &b.Records[i]
		if r.ID == "" || len(r.ID) > 64 || r.SandboxID == "" || r.StartedAt.IsZero() {
			return fmt.Errorf("%w: record %d needs an id, a sandbox_id and started_at", ErrInvalid, i)
		}
		known := false
		for _, k := range connlog.Kinds {
			known = known || r.Kind == k
		}
		if !known {
			return fmt.Errorf("%w: record %d: unknown kind %q", ErrInvalid, i, r.Kind)
		}
		if r.BytesIn < 0 || r.BytesOut < 0 || len(r.Channels) > 8 {
			return fmt.Errorf("%w: record %d: bad counters or channels", ErrInvalid, i)
		}
		r.Credential = connlog.Cut(r.Credential, 128)
		r.ClientAddr = connlog.Cut(r.ClientAddr, 64)
		r.ClientKind = connlog.Cut(r.ClientKind, 32)
		r.ClientDetail = connlog.Cut(r.ClientDetail, connlog.MaxDetail)
		r.EndReason = connlog.Cut(r.EndReason, connlog.MaxDetail)
		for j := range r.Channels {
			r.Channels[j] = connlog.Cut(r.Channels[j], 32)
		}
	}
	return nil
}

// Settle ends, as edge_lost, every live connection whose lease lapsed.
func (l *Log) Settle(ctx context.Context) (int, error) {
	var n int
	err := l.store.InTx(ctx, func(tx store.Tx) error {
		var err error
		n, err = tx.SettleLostConnections(ctx, l.cfg.Now().UTC())
		return err
	})
	return n, err
}

// SweepEvery settles lapsed leases every SweepEvery until ctx ends. Every
// control replica may run it: the settling update is idempotent.
func (l *Log) SweepEvery(ctx context.Context) {
	t := time.NewTicker(l.cfg.SweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			n, err := l.Settle(ctx)
			switch {
			case err != nil && ctx.Err() == nil:
				l.cfg.Logger.WarnContext(ctx, "settle lost connections", "err", err)
			case n > 0:
				l.cfg.Logger.InfoContext(ctx, "settled connections whose reporter stopped renewing", "count", n)
			}
		}
	}
}
