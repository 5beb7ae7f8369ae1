package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/connlog"
)

func testConnections(t *testing.T, ctx context.Context, s store.Store) {
	sa, sb, other := sandbox("a", "sb-a", t0), sandbox("a", "sb-b", t0), sandbox("b", "sb-other", t0)
	insertSandboxes(t, s, sa, sb, other)
	report := func(b connlog.Batch, now time.Time) {
		t.Helper()
		inTx(t, s, func(tx store.Tx) error { return tx.ReportConnections(ctx, b, now) })
	}
	rec := func(id, sandboxID string, kind connlog.Kind, start time.Time) connlog.Record {
		return connlog.Record{ID: id, SandboxID: sandboxID, Kind: kind, Credential: "cred-" + id, ClientAddr: "127.0.0.1:1",
			ClientKind: connlog.ClientOpenSSH, ClientDetail: "SSH-2.0-OpenSSH_9.6", StartedAt: start}
	}
	// Edge 1 opens three connections; edge 2 one; a record for an unknown
	// sandbox is dropped.
	c1 := rec("c1", sa.ID, connlog.KindSSH, t0)
	c1.Channels = []string{"shell"}
	c2 := rec("c2", sa.ID, connlog.KindPreview, t0.Add(time.Second))
	c3 := rec("c3", sb.ID, connlog.KindSSH, t0.Add(2*time.Second))
	report(connlog.Batch{Reporter: "edge-1", LeaseSeconds: 10, Records: []connlog.Record{c1, c2, c3, rec("cx", "nope", connlog.KindSSH, t0)}}, t0)
	report(connlog.Batch{Reporter: "edge-2", LeaseSeconds: 10, Records: []connlog.Record{rec("c4", other.ID, connlog.KindMCP, t0)}}, t0)

	list := func(f store.ConnectionFilter) []string {
		t.Helper()
		got, err := s.Connections(ctx, f)
		if err != nil {
			t.Fatalf("Connections(%+v): %v", f, err)
		}
		var ids []string
		for _, c := range got {
			ids = append(ids, c.ID)
		}
		return ids
	}
	wantEqual(t, "account a, newest first", list(store.ConnectionFilter{AccountID: "a"}), []string{"c3", "c2", "c1"})
	wantEqual(t, "sandbox a", list(store.ConnectionFilter{AccountID: "a", SandboxID: sa.ID}), []string{"c2", "c1"})
	wantEqual(t, "page after c3", list(store.ConnectionFilter{AccountID: "a", Before: "c3", Limit: 1}), []string{"c2"})
	wantEqual(t, "other account's sandbox is not a's", list(store.ConnectionFilter{AccountID: "a", SandboxID: other.ID}), []string(nil))

	got, err := s.Connections(ctx, store.ConnectionFilter{AccountID: "a", SandboxID: sa.ID})
	if err != nil {
		t.Fatal(err)
	}
	c := got[1]
	if c.AccountID != "a" || c.Reporter != "edge-1" || c.Credential != "cred-c1" || c.ClientKind != connlog.ClientOpenSSH ||
		c.ClientDetail != "SSH-2.0-OpenSSH_9.6" || !c.StartedAt.Equal(t0) || c.EndedAt != nil ||
		c.LeaseUntil == nil || !c.LeaseUntil.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("c1 as stored: %+v", c)
	}
	wantEqual(t, "c1 channels", c.Channels, []string{"shell"})

	// Edge 1's next batch updates c1 (client kind learned, bytes, a new
	// channel) and ends c2; the batch renews c3's lease though c3 did not
	// change.
	c1.ClientKind, c1.BytesIn, c1.BytesOut = connlog.ClientVSCode, 100, 2000
	c1.Channels = []string{"port_forward", "shell"}
	end := t0.Add(5 * time.Second)
	c2.EndedAt, c2.EndReason, c2.BytesOut = &end, connlog.EndClosed, 7
	report(connlog.Batch{Reporter: "edge-1", LeaseSeconds: 10, Records: []connlog.Record{c1, c2}}, t0.Add(5*time.Second))
	wantEqual(t, "live of a", list(store.ConnectionFilter{AccountID: "a", LiveOnly: true}), []string{"c3", "c1"})
	got, _ = s.Connections(ctx, store.ConnectionFilter{AccountID: "a", SandboxID: sa.ID})
	if c := got[1]; c.ClientKind != connlog.ClientVSCode || c.BytesIn != 100 || c.BytesOut != 2000 || len(c.Channels) != 2 {
		t.Fatalf("c1 after update: %+v", c)
	}
	if c := got[0]; c.EndedAt == nil || !c.EndedAt.Equal(end) || c.EndReason != connlog.EndClosed || c.BytesOut != 7 || c.LeaseUntil != nil {
		t.Fatalf("c2 after close: %+v", c)
	}
	counts, err := s.LiveConnectionCounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "live counts", counts, map[connlog.Kind]int{connlog.KindSSH: 2, connlog.KindMCP: 1})

	// Edge 2 stops reporting: at t0+12s its lease (t0+10s) ran out, edge
	// 1's (renewed to t0+15s) did not.
	var n int
	inTx(t, s, func(tx store.Tx) error {
		var err error
		n, err = tx.SettleLostConnections(ctx, t0.Add(12*time.Second))
		return err
	})
	wantEqual(t, "settled", n, 1)
	got, _ = s.Connections(ctx, store.ConnectionFilter{AccountID: "b"})
	if c := got[0]; c.EndedAt == nil || !c.EndedAt.Equal(t0.Add(10*time.Second)) || c.EndReason != connlog.EndEdgeLost {
		t.Fatalf("c4 after its edge was lost: %+v", c)
	}
	// A late batch from the lost edge does not bring c4 back.
	report(connlog.Batch{Reporter: "edge-2", LeaseSeconds: 10, Records: []connlog.Record{rec("c4", other.ID, connlog.KindMCP, t0)}}, t0.Add(13*time.Second))
	wantEqual(t, "live of b after a late batch", list(store.ConnectionFilter{AccountID: "b", LiveOnly: true}), []string(nil))
	// Nor does another reporter rewrite edge 1's row.
	c1.ClientKind = "forged"
	report(connlog.Batch{Reporter: "edge-2", LeaseSeconds: 10, Records: []connlog.Record{c1}}, t0.Add(13*time.Second))
	got, _ = s.Connections(ctx, store.ConnectionFilter{AccountID: "a", SandboxID: sa.ID})
	wantEqual(t, "c1's client after another reporter's write", got[1].ClientKind, connlog.ClientVSCode)
}
