package lifecycle

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sbxedge/sbx/control/store"
)

// Sentinel errors the API maps to problem documents. Lifecycle never
// speaks HTTP; control/api translates these in one place.
var (
	ErrNotFound           = errors.New("sandbox not found")
	ErrState              = errors.New("sandbox state forbids this")
	ErrLimit              = errors.New("concurrency limit reached")
	ErrUnknownProfile     = errors.New("unknown profile")
	ErrInvalid            = errors.New("invalid request")
	ErrDisabled           = errors.New("sandboxes are not enabled for this account")
	ErrPlatformNotAllowed = errors.New("platform not allowed for this account")
	ErrIdempotencyReuse   = errors.New("idempotency key reused with a different request")
	ErrDeadlineShortened  = errors.New("the deadline would move earlier")
)

// FieldError is an ErrInvalid naming the offending input.
type FieldError struct {
	Field  string
	Detail string
}

func (e *FieldError) Error() string { return fmt.Sprintf("%s: %s", e.Field, e.Detail) }

// Unwrap lets errors.Is(err, ErrInvalid) match.
func (e *FieldError) Unwrap() error { return ErrInvalid }

func invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Detail: fmt.Sprintf(format, args...)}
}

// UnknownProfileError is an ErrUnknownProfile naming the profiles that
// exist, so whoever asked (an agent, mostly) can pick one without
// another call.
type UnknownProfileError struct {
	Name string
	// Known is the names of the profiles that exist, sorted; nil when
	// they could not be read.
	Known []string
}

func (e *UnknownProfileError) Error() string {
	if len(e.Known) == 0 {
		return fmt.Sprintf("unknown profile: %q", e.Name)
	}
	return fmt.Sprintf("unknown profile: %q; profiles: %s", e.Name, strings.Join(e.Known, ", "))
}

// Unwrap lets errors.Is(err, ErrUnknownProfile) match.
func (e *UnknownProfileError) Unwrap() error { return ErrUnknownProfile }

// StateError is an ErrState carrying the state that forbade the call.
type StateError struct {
	State  string
	Action string
}

func (e *StateError) Error() string {
	return fmt.Sprintf("cannot %s a sandbox that is %s%s", e.Action, e.State, stateHint(e.State))
}

// stateHint says what to do about a sandbox in state s, for the person or
// agent that was refused: an ended one never comes back, a starting one
// only needs time.
func stateHint(s string) string {
	switch store.State(s) {
	case store.StateTerminating, store.StateTerminated, store.StateFailed:
		return "; it has ended and cannot be used again: create a new sandbox"
	case store.StatePending, store.StateRestoring, store.StateSuspending:
		return "; it is changing state: try again in a few seconds"
	}
	return ""
}

// Unwrap lets errors.Is(err, ErrState) match.
func (e *StateError) Unwrap() error { return ErrState }

// WakeWaitError is Wake's error when its context ends before the sandbox
// is ready: State is the state it was still in (suspending: the
// suspension has not finished, and the restore waits for it).
type WakeWaitError struct {
	State string
	Err   error // the context's cause
}

func (e *WakeWaitError) Error() string {
	return fmt.Sprintf("sandbox still %s: %v", e.State, e.Err)
}

// Unwrap lets errors.Is(err, context.DeadlineExceeded) match.
func (e *WakeWaitError) Unwrap() error { return e.Err }
