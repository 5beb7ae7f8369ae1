package lifecycle_test

import (
	"strings"
	"testing"

	"github.com/sbxedge/sbx/control/lifecycle"
)

// TestStateErrorSaysWhatToDo: a refusal for the sandbox's state says what
// went wrong and what to do: an ended sandbox is gone for good, a changing
// one needs a moment.
func TestStateErrorSaysWhatToDo(t *testing.T) {
	for _, tc := range []struct {
		state, want string
	}{
		{"terminated", "cannot reach a sandbox that is terminated; it has ended and cannot be used again: create a new sandbox"},
		{"failed", "create a new sandbox"},
		{"terminating", "create a new sandbox"},
		{"pending", "cannot reach a sandbox that is pending; it is changing state: try again in a few seconds"},
		{"restoring", "try again in a few seconds"},
	} {
		got := (&lifecycle.StateError{State: tc.state, Action: "reach"}).Error()
		if !strings.Contains(got, tc.want) {
			t.Errorf("StateError %s: %q, want %q in it", tc.state, got, tc.want)
		}
	}
}
