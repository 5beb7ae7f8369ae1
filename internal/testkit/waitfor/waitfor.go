// Package waitfor lets a test wait on the condition it means instead of
// sleeping for a time it hopes is long enough.
package waitfor

import (
	"testing"
	"time"
)

// Interval is how often a condition is checked.
const Interval = 20 * time.Millisecond

// Cond checks cond every Interval until it is true, and fails the test,
// saying what never happened, if it is still false after timeout or the
// test's context ends.
func Cond(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Try(t, timeout, cond) {
		t.Fatalf("after %v: %s never happened", timeout, what)
	}
}

// Try checks cond every Interval until it is true (true) or timeout
// passes or the test's context ends (false), for a test that reports the
// failure itself.
func Try(t testing.TB, timeout time.Duration, cond func() bool) bool {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	for {
		if cond() {
			return true
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			return cond()
		case <-t.Context().Done():
			return false
		}
	}
}
