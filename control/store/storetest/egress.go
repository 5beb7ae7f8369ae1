package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/egresspolicy"
)

// testSandboxNetwork: a sandbox's own egress policy round-trips through
// insert and update, and nil (follow the profile's) stays nil.
func testSandboxNetwork(t *testing.T, ctx context.Context, s store.Store) {
	own := sandbox("a", "sb-net", t0)
	own.Network = &egresspolicy.Spec{Egress: egresspolicy.Allowlist, Allow: []string{"github.com", "*.npmjs.org:443"}}
	plain := sandbox("a", "sb-plain", t0)
	insertSandboxes(t, s, own, plain)
	wantRead(t, "own policy", own)(s.Sandbox(ctx, own.ID))
	wantRead(t, "profile's policy", plain)(s.Sandbox(ctx, plain.ID))

	inTx(t, s, func(tx store.Tx) error {
		cur, err := tx.SandboxForUpdate(ctx, plain.ID)
		if err != nil {
			return err
		}
		cur.Network = &egresspolicy.Spec{Egress: egresspolicy.None}
		plain = cur
		return tx.UpdateSandbox(ctx, cur)
	})
	wantRead(t, "policy set by update", plain)(s.Sandbox(ctx, plain.ID))
	inTx(t, s, func(tx store.Tx) error {
		cur, err := tx.SandboxForUpdate(ctx, own.ID)
		if err != nil {
			return err
		}
		cur.Network = nil
		own = cur
		return tx.UpdateSandbox(ctx, cur)
	})
	wantRead(t, "policy cleared by update", own)(s.Sandbox(ctx, own.ID))
}

// testEgressLog: decisions come back newest first, per sandbox, paged
// by ID, with every field as written.
func testEgressLog(t *testing.T, ctx context.Context, s store.Store) {
	insertSandboxes(t, s, sandbox("a", "sb-log", t0), sandbox("a", "sb-quiet", t0))
	var want []store.EgressDecision
	inTx(t, s, func(tx store.Tx) error {
		for i := range 5 {
			d := store.EgressDecision{
				SandboxID: "sb-log", At: t0.Add(time.Duration(i) * time.Second), Host: "github.com", Port: 443,
				Addr: "140.82.121.4", Verdict: "allowed", BytesUp: int64(100 * i), BytesDown: int64(1000 * i),
			}
			if i%2 == 1 {
				d.Host, d.Addr, d.Verdict, d.Reason = "example.com", "", "denied", "example.com:443 is not in this sandbox's allowlist"
			}
			if err := tx.InsertEgressDecision(ctx, d); err != nil {
				return err
			}
			want = append([]store.EgressDecision{d}, want...)
		}
		return nil
	})
	first, err := s.EgressDecisions(ctx, "sb-log", 0, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 3 {
		t.Fatalf("first page: %d decisions, want 3", len(first))
	}
	rest, err := s.EgressDecisions(ctx, "sb-log", first[2].ID, 10)
	if err != nil {
		t.Fatal(err)
	}
	got := append(first, rest...)
	if len(got) != len(want) {
		t.Fatalf("%d decisions in all, want %d", len(got), len(want))
	}
	for i := 1; i < len(got); i++ {
		if got[i].ID >= got[i-1].ID {
			t.Errorf("decision %d has ID %d after %d: want newest first", i, got[i].ID, got[i-1].ID)
		}
	}
	for i := range got {
		got[i].ID = 0
	}
	wantEqual(t, "egress log", got, want)
	quiet, err := s.EgressDecisions(ctx, "sb-quiet", 0, 10)
	if err != nil || len(quiet) != 0 {
		t.Errorf("another sandbox's log: %v, %v; want it empty", quiet, err)
	}
}
