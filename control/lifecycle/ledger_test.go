package lifecycle_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/store"
)

func TestCheckLedger(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(m int) *time.Time { v := t0.Add(time.Duration(m) * time.Minute); return &v }
	line := func(id int64, kind store.SessionKind, from int, to *time.Time, reason string) store.Session {
		return store.Session{ID: id, SandboxID: "sbx-1", Kind: kind, StartedAt: *at(from), EndedAt: to, EndReason: reason}
	}
	compute, storage := store.SessionCompute, store.SessionStorage
	cases := []struct {
		name    string
		state   store.State
		ready   bool
		lines   []store.Session
		wantErr string // empty: consistent
	}{
		{"pending, never ready", store.StatePending, false, nil, ""},
		{"failed before ready", store.StateFailed, false, nil, ""},
		{"ready", store.StateReady, true, []store.Session{line(1, compute, 0, nil, "")}, ""},
		{"ready without a line", store.StateReady, true, nil, "0 open compute lines in state ready, want 1"},
		{"ready with two lines", store.StateReady, true, []store.Session{line(1, compute, 0, nil, ""), line(2, compute, 1, nil, "")}, "2 open compute lines"},
		{"suspended", store.StateSuspended, true, []store.Session{line(1, compute, 0, at(5), "idle_offload"), line(2, storage, 5, nil, "")}, ""},
		{"suspended, compute left open", store.StateSuspended, true, []store.Session{line(1, compute, 0, nil, ""), line(2, storage, 5, nil, "")}, "1 open compute lines in state suspended, want 0"},
		{"terminated", store.StateTerminated, true, []store.Session{line(1, compute, 0, at(9), "explicit_delete")}, ""},
		{"terminated, still billing", store.StateTerminated, true, []store.Session{line(1, compute, 0, nil, "")}, "1 open compute lines in state terminated"},
		{"closed without a reason", store.StateTerminated, true, []store.Session{line(1, compute, 0, at(9), "")}, "closed without a reason"},
		{"ends before it starts", store.StateTerminated, true, []store.Session{line(1, compute, 5, at(1), "deadline")}, "before it starts"},
		{"overlapping lines", store.StateReady, true, []store.Session{line(1, compute, 0, at(5), "idle_offload"), line(2, compute, 3, nil, "")}, "overlap"},
		{"lines but never ready", store.StatePending, false, []store.Session{line(1, compute, 0, at(1), "deadline")}, "never ready"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sb := store.Sandbox{ID: "sbx-1", State: c.state}
			if c.ready {
				sb.ReadyAt = at(0)
			}
			err := lifecycle.CheckLedger(sb, c.lines)
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("got %v, want consistent", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Fatalf("got %v, want an error containing %q", err, c.wantErr)
			}
		})
	}
}
