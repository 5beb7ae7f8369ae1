package backend

import (
	"context"
	"fmt"

	"github.com/sbxedge/sbx/control/store"
)

// InsertEgressDecision implements store.Tx.
func (q Queries) InsertEgressDecision(ctx context.Context, d store.EgressDecision) error {
	_, err := q.DB.Exec(ctx, `INSERT INTO egress_log (sandbox_id, at, host, port, addr, verdict, reason, bytes_up, bytes_down)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		d.SandboxID, q.timeOrNow(d.At), d.Host, d.Port, d.Addr, d.Verdict, d.Reason, d.BytesUp, d.BytesDown)
	if err != nil {
		return fmt.Errorf("insert egress decision of %s: %w", d.SandboxID, err)
	}
	return nil
}

// EgressDecisions implements store.Reader.
func (q Queries) EgressDecisions(ctx context.Context, sandboxID string, beforeID int64, limit int) ([]store.EgressDecision, error) {
	d := q.Dialect
	return List(ctx, q.DB, "egress decisions", func(row Row) (store.EgressDecision, error) {
		var e store.EgressDecision
		err := row.Scan(&e.ID, &e.SandboxID, d.TimeDest(&e.At), &e.Host, &e.Port, &e.Addr, &e.Verdict, &e.Reason, &e.BytesUp, &e.BytesDown)
		e.At = e.At.UTC()
		return e, err
	}, `SELECT id, sandbox_id, at, host, port, addr, verdict, reason, bytes_up, bytes_down FROM egress_log
		WHERE sandbox_id = $1 AND ($2 = 0 OR id < $2)
		ORDER BY id DESC LIMIT $3`, sandboxID, beforeID, limit)
}
