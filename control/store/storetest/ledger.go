package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

func session(sb store.Sandbox, kind store.SessionKind, start time.Time) store.Session {
	return store.Session{SandboxID: sb.ID, AccountID: sb.AccountID, Platform: sb.Platform, Kind: kind, StartedAt: start}
}

func testSessions(t *testing.T, ctx context.Context, s store.Store) {
	sb := sandbox("a", "sb-1", t0)
	insertSandboxes(t, s, sb)

	var computeID, storageID int64
	inTx(t, s, func(tx store.Tx) error {
		var err error
		if computeID, err = tx.OpenSession(ctx, session(sb, store.SessionCompute, t0)); err != nil {
			return err
		}
		// A second open compute session is refused, and the refusal leaves
		// the transaction usable.
		_, err = tx.OpenSession(ctx, session(sb, store.SessionCompute, t0.Add(time.Second)))
		wantErr(t, "second open compute session", err, store.ErrConflict)
		storageID, err = tx.OpenSession(ctx, session(sb, store.SessionStorage, t0.Add(time.Second)))
		return err
	})
	if computeID == 0 || storageID == 0 || computeID == storageID {
		t.Fatalf("session ids: got %d and %d, want distinct non-zero", computeID, storageID)
	}
	// The partial unique index holds across transactions too.
	err := s.InTx(ctx, func(tx store.Tx) error {
		_, err := tx.OpenSession(ctx, session(sb, store.SessionCompute, t0.Add(2*time.Second)))
		return err
	})
	wantErr(t, "open compute session in a later transaction", err, store.ErrConflict)

	end := t0.Add(time.Hour)
	closeCompute := func(at time.Time, reason string) int {
		var n int
		inTx(t, s, func(tx store.Tx) error {
			var err error
			n, err = tx.CloseSessions(ctx, sb.ID, store.SessionCompute, at, reason)
			return err
		})
		return n
	}
	if n := closeCompute(end, "idle_offload"); n != 1 {
		t.Errorf("first close: got %d closed, want 1", n)
	}
	// Closing again must not move the recorded end.
	if n := closeCompute(end.Add(time.Hour), "explicit_delete"); n != 0 {
		t.Errorf("second close: got %d closed, want 0", n)
	}

	var reopenedID int64
	inTx(t, s, func(tx store.Tx) error {
		var err error
		reopenedID, err = tx.OpenSession(ctx, session(sb, store.SessionCompute, end.Add(time.Minute)))
		return err
	})

	got, err := s.Sessions(ctx, sb.ID)
	if err != nil {
		t.Fatalf("Sessions: %v", err)
	}
	want := []store.Session{
		{ID: computeID, SandboxID: sb.ID, AccountID: "a", Platform: "linux", Kind: store.SessionCompute,
			StartedAt: t0, EndedAt: ptr(end), EndReason: "idle_offload"},
		{ID: storageID, SandboxID: sb.ID, AccountID: "a", Platform: "linux", Kind: store.SessionStorage,
			StartedAt: t0.Add(time.Second)},
		{ID: reopenedID, SandboxID: sb.ID, AccountID: "a", Platform: "linux", Kind: store.SessionCompute,
			StartedAt: end.Add(time.Minute)},
	}
	wantEqual(t, "sessions by start", got, want)
}

func testUsage(t *testing.T, ctx context.Context, s store.Store) {
	linux := sandbox("a", "sb-linux", t0)
	mac := sandbox("a", "sb-mac", t0)
	mac.Platform = "macos"
	foreign := sandbox("b", "sb-foreign", t0)
	insertSandboxes(t, s, linux, mac, foreign)

	from, to := t0, t0.Add(time.Hour)
	m := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Minute) }
	closed := []struct {
		sb         store.Sandbox
		kind       store.SessionKind
		start, end time.Time
	}{
		{linux, store.SessionCompute, m(-10), m(10)}, // clipped at from: 10 min
		{linux, store.SessionCompute, m(20), m(30)},  // inside: 10 min
		{linux, store.SessionCompute, m(50), m(70)},  // clipped at to: 10 min
		{linux, store.SessionStorage, m(-120), m(-60)},
		{linux, store.SessionStorage, m(60), m(80)}, // starts at to: excluded
		{mac, store.SessionStorage, m(0), m(30)},    // 30 min
		{foreign, store.SessionCompute, m(0), m(60)},
	}
	inTx(t, s, func(tx store.Tx) error {
		for _, c := range closed {
			if _, err := tx.OpenSession(ctx, session(c.sb, c.kind, c.start)); err != nil {
				return err
			}
			if _, err := tx.CloseSessions(ctx, c.sb.ID, c.kind, c.end, "test"); err != nil {
				return err
			}
		}
		_, err := tx.OpenSession(ctx, session(mac, store.SessionCompute, m(45)))
		return err
	})

	tests := []struct {
		name string
		now  time.Time
		want []store.UsageRow
	}{
		{"open session counts to now", m(55), []store.UsageRow{
			{Platform: "linux", Kind: store.SessionCompute, Seconds: 1800},
			{Platform: "macos", Kind: store.SessionCompute, Seconds: 600},
			{Platform: "macos", Kind: store.SessionStorage, Seconds: 1800},
		}},
		{"open session clipped to window", m(120), []store.UsageRow{
			{Platform: "linux", Kind: store.SessionCompute, Seconds: 1800},
			{Platform: "macos", Kind: store.SessionCompute, Seconds: 900},
			{Platform: "macos", Kind: store.SessionStorage, Seconds: 1800},
		}},
		{"open session not started by now", m(40), []store.UsageRow{
			{Platform: "linux", Kind: store.SessionCompute, Seconds: 1800},
			{Platform: "macos", Kind: store.SessionStorage, Seconds: 1800},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantRead(t, "usage", tc.want)(s.Usage(ctx, "a", from, to, tc.now))
		})
	}

	got, err := s.Usage(ctx, "a", t0.Add(-time.Second), t0.Add(-time.Second/2), m(55))
	if err != nil {
		t.Fatalf("Usage: %v", err)
	}
	wantEqual(t, "usage at sub-second precision", got, []store.UsageRow{
		{Platform: "linux", Kind: store.SessionCompute, Seconds: 0.5},
	})
}

func testEvents(t *testing.T, ctx context.Context, s store.Store) {
	in := []store.Event{
		{SandboxID: "sb-1", AccountID: "a", Type: "state", State: store.StatePending, Actor: "api", At: t0},
		{SandboxID: "sb-2", AccountID: "a", Type: "state", State: store.StateReady, At: t0},
		{SandboxID: "sb-1", AccountID: "a", Type: "state", State: store.StateReady, Reason: "provisioned", At: t0.Add(time.Second)},
		{SandboxID: "sb-1", AccountID: "a", Type: "grant", Message: "granted prj-1", Actor: "api", At: t0.Add(time.Second)},
	}
	for _, e := range in {
		inTx(t, s, func(tx store.Tx) error { return tx.InsertEvent(ctx, e) })
	}
	got, err := s.Events(ctx, "sb-1", 0)
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	if len(got) != 3 {
		t.Fatalf("Events(sb-1, 0): got %d events, want 3: %+v", len(got), got)
	}
	for i, want := range []store.Event{in[0], in[2], in[3]} {
		want.ID = got[i].ID
		wantEqual(t, "event", got[i], want)
		if i > 0 && got[i].ID <= got[i-1].ID {
			t.Errorf("event ids not increasing: %d after %d", got[i].ID, got[i-1].ID)
		}
	}
	wantRead(t, "events after the first", got[1:])(s.Events(ctx, "sb-1", got[0].ID))
	none, err := s.Events(ctx, "sb-1", got[2].ID)
	if err != nil {
		t.Fatalf("Events after last: %v", err)
	}
	wantEqual(t, "events after the last", len(none), 0)
}
