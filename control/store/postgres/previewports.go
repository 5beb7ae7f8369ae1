package postgres

import (
	"context"
	"fmt"

	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/control/store/internal/backend"
)

const previewPortCols = backend.PreviewPortCols

func scanPreviewPort(row backend.Row) (store.PreviewPort, error) {
	var p store.PreviewPort
	if err := row.Scan(&p.SandboxID, &p.AccountID, &p.Port, &p.Label, &p.Access, &p.HostPolicy, &p.CreatedAt); err != nil {
		return store.PreviewPort{}, err
	}
	p.CreatedAt = p.CreatedAt.UTC()
	return p, nil
}

func (q queries) PreviewPorts(ctx context.Context, sandboxID string) ([]store.PreviewPort, error) {
	return list(ctx, q.q, "list preview ports of "+sandboxID, scanPreviewPort, `SELECT `+previewPortCols+` FROM preview_ports WHERE sandbox_id = $1 ORDER BY port`, sandboxID)
}

func (q queries) PreviewPortByLabel(ctx context.Context, label string) (store.PreviewPort, error) {
	p, err := scanPreviewPort(q.q.QueryRow(ctx, `SELECT `+previewPortCols+` FROM preview_ports WHERE label = $1`, label))
	if err != nil {
		return store.PreviewPort{}, notFound(err, "preview port")
	}
	return p, nil
}

func (t *tx) PutPreviewPort(ctx context.Context, p store.PreviewPort) (store.PreviewPort, error) {
	// A label collision is a unique violation, which aborts the
	// transaction; the caller retries the whole transaction with a new
	// label (a 1 in 2^100 event).
	got, err := scanPreviewPort(t.q.QueryRow(ctx, `INSERT INTO preview_ports (`+previewPortCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (sandbox_id, port) DO UPDATE SET access = excluded.access, host_policy = excluded.host_policy
		RETURNING `+previewPortCols,
		p.SandboxID, p.AccountID, p.Port, p.Label, p.Access, p.HostPolicy, orNow(p.CreatedAt)))
	if err != nil {
		return store.PreviewPort{}, conflict(err, fmt.Sprintf("put preview port %s:%d", p.SandboxID, p.Port))
	}
	return got, nil
}

func (t *tx) DeletePreviewPort(ctx context.Context, sandboxID string, port int) error {
	tag, err := t.q.Exec(ctx, `DELETE FROM preview_ports WHERE sandbox_id = $1 AND port = $2`, sandboxID, port)
	return oneRow(tag, err, fmt.Sprintf("delete preview port %s:%d", sandboxID, port), store.ErrNotFound)
}
