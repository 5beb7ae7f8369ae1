package storetest

import (
	"context"
	"slices"
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
	own.Credentials = []string{"anthropic", "github"}
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

// testEgressLogPrune: pruning deletes decisions older than the cutoff,
// oldest first, at most limit at a time, across sandboxes, and keeps
// the rest whole.
func testEgressLogPrune(t *testing.T, ctx context.Context, s store.Store) {
	insertSandboxes(t, s, sandbox("a", "sb-p1", t0), sandbox("a", "sb-p2", t0))
	inTx(t, s, func(tx store.Tx) error {
		for i := range 6 {
			id := []string{"sb-p1", "sb-p2"}[i%2]
			d := store.EgressDecision{SandboxID: id, At: t0.Add(time.Duration(i) * time.Hour), Host: "h" + string(rune('a'+i)), Port: 443, Verdict: "allowed"}
			if err := tx.InsertEgressDecision(ctx, d); err != nil {
				return err
			}
		}
		return nil
	})
	prune := func(before time.Time, limit int) int {
		t.Helper()
		var n int
		inTx(t, s, func(tx store.Tx) error {
			var err error
			n, err = tx.PruneEgressLog(ctx, before, limit)
			return err
		})
		return n
	}
	hosts := func() []string {
		t.Helper()
		var out []string
		for _, id := range []string{"sb-p1", "sb-p2"} {
			list, err := s.EgressDecisions(ctx, id, 0, 100)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range list {
				out = append(out, d.Host)
			}
		}
		slices.Sort(out)
		return out
	}
	// Four are older than t0+4h (ha..hd); two at a time, oldest first.
	if n := prune(t0.Add(4*time.Hour), 2); n != 2 {
		t.Errorf("first batch pruned %d, want 2", n)
	}
	if got := hosts(); !slices.Equal(got, []string{"hc", "hd", "he", "hf"}) {
		t.Errorf("after the first batch: %v; want the two oldest gone", got)
	}
	if n := prune(t0.Add(4*time.Hour), 10); n != 2 {
		t.Errorf("second batch pruned %d, want 2", n)
	}
	if n := prune(t0.Add(4*time.Hour), 10); n != 0 {
		t.Errorf("third batch pruned %d, want 0", n)
	}
	if got := hosts(); !slices.Equal(got, []string{"he", "hf"}) {
		t.Errorf("after pruning: %v; want he and hf (at and after the cutoff)", got)
	}
}

// testCredentials: credentials round-trip, list by name, replace in
// place keeping their creation time, record their use, and delete.
func testCredentials(t *testing.T, ctx context.Context, s store.Store) {
	c := store.Credential{AccountID: "a", Name: "zeta", Upstream: "https://api.example.com", Header: "x-api-key", Sealed: []byte{1, 2, 3}, CreatedAt: t0}
	other := store.Credential{AccountID: "b", Name: "zeta", Upstream: "https://b.example.com", Header: "authorization", Sealed: []byte{9}, CreatedAt: t0}
	alpha := c
	alpha.Name = "alpha"
	inTx(t, s, func(tx store.Tx) error {
		for _, x := range []store.Credential{c, other, alpha} {
			if err := tx.PutCredential(ctx, x); err != nil {
				return err
			}
		}
		return nil
	})
	wantRead(t, "credential", c)(s.Credential(ctx, "a", "zeta"))
	list, err := s.Credentials(ctx, "a")
	if err != nil || len(list) != 2 || list[0].Name != "alpha" || list[1].Name != "zeta" {
		t.Fatalf("Credentials(a) = %+v, %v; want alpha, zeta", list, err)
	}
	replaced := c
	replaced.Upstream, replaced.Sealed = "https://api2.example.com", []byte{4}
	used := t0.Add(time.Hour)
	inTx(t, s, func(tx store.Tx) error {
		if err := tx.PutCredential(ctx, store.Credential{AccountID: "a", Name: "zeta", Upstream: replaced.Upstream, Header: c.Header, Sealed: replaced.Sealed, CreatedAt: t0.Add(time.Minute)}); err != nil {
			return err
		}
		return tx.TouchCredential(ctx, "a", "zeta", used)
	})
	replaced.LastUsedAt = &used
	wantRead(t, "replaced and used", replaced)(s.Credential(ctx, "a", "zeta"))
	wantRead(t, "other account's untouched", other)(s.Credential(ctx, "b", "zeta"))
	inTx(t, s, func(tx store.Tx) error { return tx.DeleteCredential(ctx, "a", "zeta") })
	_, err = s.Credential(ctx, "a", "zeta")
	wantErr(t, "deleted credential", err, store.ErrNotFound)
	err = s.InTx(ctx, func(tx store.Tx) error { return tx.DeleteCredential(ctx, "a", "zeta") })
	wantErr(t, "delete twice", err, store.ErrNotFound)
}
