package sqlite

import (
	"context"
	"fmt"

	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/control/store/internal/backend"
)

const previewPortCols = backend.PreviewPortCols

func scanPreviewPort(row scanner) (store.PreviewPort, error) {
	var p store.PreviewPort
	var created int64
	if err := row.Scan(&p.SandboxID, &p.AccountID, &p.Port, &p.Label, &p.Access, &p.HostPolicy, &created); err != nil {
		return store.PreviewPort{}, err
	}
	p.CreatedAt = fromMicros(created)
	return p, nil
}

func (q queries) PreviewPorts(ctx context.Context, sandboxID string) ([]store.PreviewPort, error) {
	return list(ctx, q.q, "list preview ports of "+sandboxID, scanPreviewPort, `SELECT `+previewPortCols+` FROM preview_ports WHERE sandbox_id = ? ORDER BY port`, sandboxID)
}

func (q queries) PreviewPortByLabel(ctx context.Context, label string) (store.PreviewPort, error) {
	p, err := scanPreviewPort(q.q.QueryRowContext(ctx, `SELECT `+previewPortCols+` FROM preview_ports WHERE label = ?`, label))
	if err != nil {
		return store.PreviewPort{}, notFound(err, "preview port")
	}
	return p, nil
}

func (t *tx) PutPreviewPort(ctx context.Context, p store.PreviewPort) (store.PreviewPort, error) {
	got, err := scanPreviewPort(t.q.QueryRowContext(ctx, `INSERT INTO preview_ports (`+previewPortCols+`)
		VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (sandbox_id, port) DO UPDATE SET access = excluded.access, host_policy = excluded.host_policy
		RETURNING `+previewPortCols,
		p.SandboxID, p.AccountID, p.Port, p.Label, p.Access, p.HostPolicy, orNow(p.CreatedAt)))
	if err != nil {
		return store.PreviewPort{}, conflict(err, fmt.Sprintf("put preview port %s:%d", p.SandboxID, p.Port))
	}
	return got, nil
}

func (t *tx) DeletePreviewPort(ctx context.Context, sandboxID string, port int) error {
	res, err := t.q.ExecContext(ctx, `DELETE FROM preview_ports WHERE sandbox_id = ? AND port = ?`, sandboxID, port)
	return oneRow(res, err, fmt.Sprintf("delete preview port %s:%d", sandboxID, port), store.ErrNotFound)
}
