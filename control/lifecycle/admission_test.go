package lifecycle_test

import (
	"testing"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/store"
)

// TestAdmissionOf: every state has one answer, and Reachable refuses
// exactly the ended ones.
func TestAdmissionOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		state store.State
		want  lifecycle.Admission
	}{
		{store.StatePending, lifecycle.Starting},
		{store.StateReady, lifecycle.Ready},
		{store.StateSuspending, lifecycle.Wakeable},
		{store.StateSuspended, lifecycle.Wakeable},
		{store.StateRestoring, lifecycle.Wakeable},
		{store.StateTerminating, lifecycle.Ended},
		{store.StateTerminated, lifecycle.Ended},
		{store.StateFailed, lifecycle.Ended},
		{"hibernating", lifecycle.Ended}, // a newer replica's state: refused
	} {
		sb := store.Sandbox{ID: "sb", State: tc.state}
		if got := lifecycle.AdmissionOf(sb); got != tc.want {
			t.Errorf("AdmissionOf(%s) = %v, want %v", tc.state, got, tc.want)
		}
		if err := lifecycle.Reachable(sb, "reach"); (err != nil) != (tc.want == lifecycle.Ended) {
			t.Errorf("Reachable(%s) = %v, want an error only for an ended sandbox", tc.state, err)
		}
	}
}

func TestAdmissionString(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, a := range []lifecycle.Admission{lifecycle.Ended, lifecycle.Starting, lifecycle.Wakeable, lifecycle.Ready, 0} {
		s := a.String()
		if s == "" || seen[s] {
			t.Errorf("Admission(%d).String() = %q: empty or not unique", a, s)
		}
		seen[s] = true
	}
}
