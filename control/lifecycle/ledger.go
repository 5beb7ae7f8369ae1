package lifecycle

import (
	"errors"
	"fmt"

	"github.com/sbxedge/sbx/control/store"
)

// The billing rule, by state: a sandbox has exactly one open compute line
// in the states below and none in any other, and likewise one open storage
// line. The transitions that change a sandbox's state write the lines that
// keep this true in the same transaction, so it holds at every commit,
// whatever crashes in between.
var (
	computeOpenIn = map[store.State]bool{store.StateReady: true, store.StateSuspending: true}
	storageOpenIn = map[store.State]bool{store.StateSuspended: true, store.StateRestoring: true}
)

// CheckLedger reports every way a sandbox's billing lines break the rule
// above, or nil: open lines per kind must match sb's state, a closed line
// must end no earlier than it started and say why, and lines of one kind
// must not overlap. A sandbox that was never ready has no lines at all.
// Tests, and operators auditing a database after an incident, call it.
func CheckLedger(sb store.Sandbox, sessions []store.Session) error {
	var errs []error
	open := map[store.SessionKind]int{}
	last := map[store.SessionKind]store.Session{}
	for _, s := range sessions {
		if s.SandboxID != sb.ID {
			errs = append(errs, fmt.Errorf("line %d belongs to %s", s.ID, s.SandboxID))
			continue
		}
		if s.EndedAt == nil {
			open[s.Kind]++
		} else {
			if s.EndedAt.Before(s.StartedAt) {
				errs = append(errs, fmt.Errorf("%s line %d ends at %v, before it starts at %v", s.Kind, s.ID, *s.EndedAt, s.StartedAt))
			}
			if s.EndReason == "" {
				errs = append(errs, fmt.Errorf("%s line %d closed without a reason", s.Kind, s.ID))
			}
		}
		if prev, ok := last[s.Kind]; ok && (prev.EndedAt == nil || s.StartedAt.Before(*prev.EndedAt)) {
			errs = append(errs, fmt.Errorf("%s lines %d and %d overlap", s.Kind, prev.ID, s.ID))
		}
		last[s.Kind] = s
	}
	for kind, in := range map[store.SessionKind]map[store.State]bool{
		store.SessionCompute: computeOpenIn, store.SessionStorage: storageOpenIn,
	} {
		want := 0
		if in[sb.State] {
			want = 1
		}
		if open[kind] != want {
			errs = append(errs, fmt.Errorf("%d open %s lines in state %s, want %d", open[kind], kind, sb.State, want))
		}
	}
	if sb.ReadyAt == nil && len(sessions) > 0 {
		errs = append(errs, fmt.Errorf("%d billing lines, but the sandbox was never ready", len(sessions)))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("ledger of %s (%s): %w", sb.ID, sb.State, err)
	}
	return nil
}
