package backend

import (
	"context"
	"fmt"
	"time"

	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/connlog"
)

const connectionCols = `id, reporter, sandbox_id, account_id, kind, credential, client_addr, client_kind,
	client_detail, channels, started_at, ended_at, lease_until, bytes_in, bytes_out, end_reason`

func (q Queries) scanConnection(r Row) (store.Connection, error) {
	var c store.Connection
	var kind string
	err := r.Scan(&c.ID, &c.Reporter, &c.SandboxID, &c.AccountID, &kind, &c.Credential, &c.ClientAddr, &c.ClientKind,
		&c.ClientDetail, q.Dialect.StringsDest(&c.Channels), q.Dialect.TimeDest(&c.StartedAt), q.Dialect.NullTimeDest(&c.EndedAt),
		q.Dialect.NullTimeDest(&c.LeaseUntil), &c.BytesIn, &c.BytesOut, &c.EndReason)
	c.Kind = connlog.Kind(kind)
	c.StartedAt, c.EndedAt, c.LeaseUntil = c.StartedAt.UTC(), store.UTCPtr(c.EndedAt), store.UTCPtr(c.LeaseUntil)
	if len(c.Channels) == 0 {
		c.Channels = nil
	}
	return c, err
}

// Connections implements store.Reader.
func (q Queries) Connections(ctx context.Context, f store.ConnectionFilter) ([]store.Connection, error) {
	if f.Limit <= 0 || f.Limit > store.MaxConnectionsPage {
		f.Limit = store.MaxConnectionsPage
	}
	query := `SELECT ` + connectionCols + ` FROM connections WHERE account_id = $1
		AND ($2 = '' OR sandbox_id = $2)
		AND (NOT $3 OR ended_at IS NULL)
		AND ($4 = '' OR (started_at, id) < (SELECT started_at, id FROM connections WHERE id = $4))
		ORDER BY started_at DESC, id DESC LIMIT $5`
	return List(ctx, q.DB, "list connections of "+f.AccountID, q.scanConnection, query, f.AccountID, f.SandboxID, f.LiveOnly, f.Before, f.Limit)
}

// ReportConnections implements store.Tx: it writes a reporter's batch
// and renews the lease of every connection the reporter holds live. A
// row already ended (by its reporter, or as edge_lost) is never written
// again, so a late batch cannot bring a settled connection back to life.
// Records of unknown sandboxes are dropped.
func (q Queries) ReportConnections(ctx context.Context, b connlog.Batch, now time.Time) error {
	lease := now.Add(b.Lease())
	for _, r := range b.Records {
		var leaseUntil *time.Time
		if r.EndedAt == nil {
			leaseUntil = &lease
		}
		channels := r.Channels
		if channels == nil {
			channels = []string{}
		}
		_, err := q.DB.Exec(ctx, `INSERT INTO connections (`+connectionCols+`)
			SELECT $1, $2, $3, s.account_id, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15
			FROM sandboxes s WHERE s.id = $3
			ON CONFLICT (id) DO UPDATE SET client_kind = excluded.client_kind, client_detail = excluded.client_detail,
				channels = excluded.channels, ended_at = excluded.ended_at, lease_until = excluded.lease_until,
				bytes_in = excluded.bytes_in, bytes_out = excluded.bytes_out, end_reason = excluded.end_reason
			WHERE connections.ended_at IS NULL AND connections.reporter = excluded.reporter`,
			r.ID, b.Reporter, r.SandboxID, string(r.Kind), r.Credential, r.ClientAddr, r.ClientKind, r.ClientDetail,
			q.Dialect.Strings(channels), q.Dialect.Time(r.StartedAt), q.Dialect.NullTime(r.EndedAt), q.Dialect.NullTime(leaseUntil),
			r.BytesIn, r.BytesOut, r.EndReason)
		if err != nil {
			return fmt.Errorf("report connection %s: %w", r.ID, err)
		}
	}
	if _, err := q.DB.Exec(ctx, `UPDATE connections SET lease_until = $2 WHERE reporter = $1 AND ended_at IS NULL`,
		b.Reporter, q.Dialect.Time(lease)); err != nil {
		return fmt.Errorf("renew connection leases of %s: %w", b.Reporter, err)
	}
	return nil
}

// SettleLostConnections implements store.Tx: every live row whose lease
// ran out before now ends at its lease with reason edge_lost.
func (q Queries) SettleLostConnections(ctx context.Context, now time.Time) (int, error) {
	n, err := q.DB.Exec(ctx, `UPDATE connections SET ended_at = lease_until, end_reason = $2
		WHERE ended_at IS NULL AND lease_until < $1`, q.Dialect.Time(now), connlog.EndEdgeLost)
	if err != nil {
		return 0, fmt.Errorf("settle lost connections: %w", err)
	}
	return int(n), nil
}

// LiveConnectionCounts implements store.Reader: live rows by kind,
// across every account.
func (q Queries) LiveConnectionCounts(ctx context.Context) (map[connlog.Kind]int, error) {
	type kc struct {
		kind string
		n    int
	}
	rows, err := List(ctx, q.DB, "count live connections", func(r Row) (kc, error) {
		var v kc
		return v, r.Scan(&v.kind, &v.n)
	}, `SELECT kind, count(*) FROM connections WHERE ended_at IS NULL GROUP BY kind`)
	if err != nil {
		return nil, err
	}
	out := make(map[connlog.Kind]int, len(rows))
	for _, r := range rows {
		out[connlog.Kind(r.kind)] = r.n
	}
	return out, nil
}
