package lifecycle

import (
	"context"
	"fmt"

	"github.com/sbxedge/sbx/control/store"
)

// The egress log is pruned by age in batches: each a short transaction,
// and at most egressPruneBatches of them per reaper tick, so a large
// backlog (a busy gateway, a long-disabled sweep) drains over a few
// ticks rather than holding the table in one long delete.
const (
	egressPruneBatch   = 1000
	egressPruneBatches = 20
)

// SweepEgressLog deletes egress decisions older than EgressLogRetention
// and reports how many it deleted. It runs with the reaper.
func (m *Manager) SweepEgressLog(ctx context.Context) (int, error) {
	before := m.now().UTC().Add(-m.cfg.EgressLogRetention)
	total := 0
	for range egressPruneBatches {
		var n int
		err := m.store.InTx(ctx, func(tx store.Tx) error {
			var err error
			n, err = tx.PruneEgressLog(ctx, before, egressPruneBatch)
			return err
		})
		if err != nil {
			return total, fmt.Errorf("sweep egress log: %w", err)
		}
		total += n
		if n < egressPruneBatch {
			break
		}
	}
	if total > 0 {
		m.log.InfoContext(ctx, "egress log pruned", "decisions", total, "before", before)
	}
	return total, nil
}
