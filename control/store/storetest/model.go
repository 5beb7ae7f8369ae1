package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

// testNamesAndLabels: names, labels and the wake flag round-trip; a name
// is unique among the account's sandboxes that have not ended, and free
// again once its sandbox ends; lists filter by name and by every label.
func testNamesAndLabels(t *testing.T, ctx context.Context, s store.Store) {
	one := sandbox("a", "sb-named", t0)
	one.Name, one.Labels, one.NoWakeOnTraffic = "pr-1234", map[string]string{"pr": "1234", "team": "edge"}, true
	other := sandbox("a", "sb-other", t0.Add(time.Second))
	other.Labels = map[string]string{"team": "edge"}
	foreign := sandbox("b", "sb-foreign", t0)
	foreign.Name = "pr-1234" // another account may use the same name
	insertSandboxes(t, s, one, other, foreign)
	wantRead(t, "named sandbox", one)(s.Sandbox(ctx, one.ID))
	wantRead(t, "by name", one)(s.SandboxByName(ctx, "a", "pr-1234"))
	wantRead(t, "by name, other account", foreign)(s.SandboxByName(ctx, "b", "pr-1234"))
	_, err := s.SandboxByName(ctx, "a", "nope")
	wantErr(t, "SandboxByName(nope)", err, store.ErrNotFound)

	dup := sandbox("a", "sb-dup", t0.Add(2*time.Second))
	dup.Name = "pr-1234"
	err = s.InTx(ctx, func(tx store.Tx) error { return tx.InsertSandbox(ctx, dup) })
	wantErr(t, "a second live sandbox of the same name", err, store.ErrConflict)

	for _, c := range []struct {
		name string
		opts store.ListOptions
		want []string
	}{
		{"all", store.ListOptions{}, []string{"sb-other", "sb-named"}},
		{"by name", store.ListOptions{Name: "pr-1234"}, []string{"sb-named"}},
		{"one label", store.ListOptions{Labels: map[string]string{"team": "edge"}}, []string{"sb-other", "sb-named"}},
		{"two labels", store.ListOptions{Labels: map[string]string{"team": "edge", "pr": "1234"}}, []string{"sb-named"}},
		{"label value differs", store.ListOptions{Labels: map[string]string{"pr": "999"}}, []string{}},
		{"name and label", store.ListOptions{Name: "pr-1234", Labels: map[string]string{"team": "core"}}, []string{}},
	} {
		c.opts.AccountID = "a"
		list, err := s.Sandboxes(ctx, c.opts)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		wantEqual(t, "list "+c.name, ids(list), c.want)
	}

	// Patched labels and flag are written; the name ends with its sandbox.
	inTx(t, s, func(tx store.Tx) error {
		cur, err := tx.SandboxForUpdate(ctx, one.ID)
		if err != nil {
			return err
		}
		cur.Labels, cur.NoWakeOnTraffic = map[string]string{"pr": "1235"}, false
		cur.State = store.StateTerminating
		one = cur
		return tx.UpdateSandbox(ctx, cur)
	})
	wantRead(t, "updated labels", one)(s.Sandbox(ctx, one.ID))
	_, err = s.SandboxByName(ctx, "a", "pr-1234")
	wantErr(t, "SandboxByName of an ended sandbox", err, store.ErrNotFound)
	insertSandboxes(t, s, dup)
	wantRead(t, "name reused once its sandbox ended", dup)(s.SandboxByName(ctx, "a", "pr-1234"))
}

// testStuckSandboxes: a sandbox is stuck in a state from the moment it
// entered it, not from its creation, and leaving the state ends that.
func testStuckSandboxes(t *testing.T, ctx context.Context, s store.Store) {
	a := sandbox("a", "sb-stuck", t0)
	b := sandbox("a", "sb-ready", t0)
	insertSandboxes(t, s, a, b)
	setState := func(id string, st store.State) {
		inTx(t, s, func(tx store.Tx) error {
			cur, err := tx.SandboxForUpdate(ctx, id)
			if err != nil {
				return err
			}
			cur.State = st
			return tx.UpdateSandbox(ctx, cur)
		})
	}
	setState(a.ID, store.StateSuspending)
	setState(b.ID, store.StateReady)
	entered := time.Now()
	stuck := func(before time.Time) []string {
		t.Helper()
		list, err := s.StuckSandboxes(ctx, before, store.StateSuspending, store.StateRestoring)
		if err != nil {
			t.Fatal(err)
		}
		return ids(list)
	}
	wantEqual(t, "stuck before it entered suspending", stuck(entered.Add(-time.Minute)), []string{})
	wantEqual(t, "stuck after", stuck(entered.Add(time.Minute)), []string{"sb-stuck"})

	// Writing the row again in the same state keeps its entry time.
	time.Sleep(20 * time.Millisecond)
	mid := time.Now()
	setState(a.ID, store.StateSuspending)
	wantEqual(t, "rewritten in the same state", stuck(mid), []string{"sb-stuck"})
	// A new state starts a new clock.
	setState(a.ID, store.StateRestoring)
	wantEqual(t, "entered restoring after mid", stuck(mid), []string{})
	wantEqual(t, "restoring, later", stuck(time.Now().Add(time.Minute)), []string{"sb-stuck"})
}
