package backend

import (
	"context"
	"fmt"

	"github.com/sbxedge/sbx/control/store"
)

func (q Queries) scanPreviewPort(row Row) (store.PreviewPort, error) {
	var p store.PreviewPort
	if err := row.Scan(&p.SandboxID, &p.AccountID, &p.Port, &p.Label, &p.Access, &p.HostPolicy, q.Dialect.TimeDest(&p.CreatedAt), &p.Name); err != nil {
		return store.PreviewPort{}, err
	}
	p.CreatedAt = p.CreatedAt.UTC()
	return p, nil
}

// PreviewPorts implements store.Reader.
func (q Queries) PreviewPorts(ctx context.Context, sandboxID string) ([]store.PreviewPort, error) {
	return List(ctx, q.DB, "list preview ports of "+sandboxID, q.scanPreviewPort,
		`SELECT `+PreviewPortCols+` FROM preview_ports WHERE sandbox_id = $1 ORDER BY port`, sandboxID)
}

// PreviewPortByLabel implements store.Reader.
func (q Queries) PreviewPortByLabel(ctx context.Context, label string) (store.PreviewPort, error) {
	p, err := q.scanPreviewPort(q.DB.QueryRow(ctx, `SELECT `+PreviewPortCols+` FROM preview_ports WHERE label = $1`, label))
	if err != nil {
		return store.PreviewPort{}, NotFound(err, q.Dialect.NoRows, "preview port")
	}
	return p, nil
}

// PutPreviewPort implements store.Tx. On Postgres a label collision is a
// unique violation, which aborts the transaction; the caller retries the
// whole transaction with a new label (a 1 in 2^100 event).
func (q Queries) PutPreviewPort(ctx context.Context, p store.PreviewPort) (store.PreviewPort, error) {
	got, err := q.scanPreviewPort(q.DB.QueryRow(ctx, `INSERT INTO preview_ports (`+PreviewPortCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		ON CONFLICT (sandbox_id, port) DO UPDATE SET access = excluded.access, host_policy = excluded.host_policy, name = excluded.name
		RETURNING `+PreviewPortCols,
		p.SandboxID, p.AccountID, p.Port, p.Label, p.Access, p.HostPolicy, q.timeOrNow(p.CreatedAt), p.Name))
	if err != nil {
		return store.PreviewPort{}, q.Dialect.Conflict(err, fmt.Sprintf("put preview port %s:%d", p.SandboxID, p.Port))
	}
	return got, nil
}

// DeletePreviewPort implements store.Tx.
func (q Queries) DeletePreviewPort(ctx context.Context, sandboxID string, port int) error {
	what := fmt.Sprintf("delete preview port %s:%d", sandboxID, port)
	n, err := q.DB.Exec(ctx, `DELETE FROM preview_ports WHERE sandbox_id = $1 AND port = $2`, sandboxID, port)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if n == 0 {
		return fmt.Errorf("%s: %w", what, store.ErrNotFound)
	}
	return nil
}
