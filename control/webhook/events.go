package webhook

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/sbxedge/sbx/control/store"
)

// EventTypes are the event types a webhook can receive: one per state a
// sandbox enters, "sandbox.<state>".
var EventTypes = func() []string {
	var ts []string
	for _, s := range []store.State{store.StatePending, store.StateReady, store.StateSuspending, store.StateSuspended,
		store.StateRestoring, store.StateTerminating, store.StateTerminated, store.StateFailed} {
		ts = append(ts, EventType(s))
	}
	return ts
}()

// EventType names the event of a sandbox entering s.
func EventType(s store.State) string { return "sandbox." + string(s) }

// patterns are the wildcards accepted besides the types themselves.
var patterns = []string{"*", "sandbox.*"}

// ValidPatterns lists what events may hold, for error messages.
func ValidPatterns() []string { return append(slices.Clone(patterns), EventTypes...) }

// CheckPatterns refuses an empty list or a pattern that is neither a
// wildcard above nor an event type, naming the valid values.
func CheckPatterns(ps []string) error {
	if len(ps) == 0 {
		return fmt.Errorf("must name at least one of %s", strings.Join(ValidPatterns(), ", "))
	}
	for _, p := range ps {
		if !slices.Contains(ValidPatterns(), p) {
			return fmt.Errorf("%q is not an event pattern; valid: %s", p, strings.Join(ValidPatterns(), ", "))
		}
	}
	return nil
}

// Matches reports whether any of ps selects event type t.
func Matches(ps []string, t string) bool {
	for _, p := range ps {
		if ok, _ := path.Match(p, t); ok {
			return true
		}
	}
	return false
}
