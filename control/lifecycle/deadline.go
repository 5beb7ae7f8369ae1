package lifecycle

import (
	"context"
	"fmt"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

// DeadlineChange is PATCH /sandboxes/{id} after JSON decoding: exactly one
// of ExtendMinutes and DeadlineMinutes.
type DeadlineChange struct {
	// ExtendMinutes adds to the current deadline, capped at the lifetime
	// limit.
	ExtendMinutes *int `json:"extend_minutes,omitempty"`
	// DeadlineMinutes sets the deadline to now + N. A deadline earlier
	// than the current one is refused unless AllowShorten.
	DeadlineMinutes *int `json:"deadline_minutes,omitempty"`
	AllowShorten    bool `json:"allow_shorten,omitempty"`
}

// ShortenError refuses a deadline earlier than the current one that was
// not asked for with allow_shorten.
type ShortenError struct {
	Current, Asked time.Time
}

func (e *ShortenError) Error() string {
	return fmt.Sprintf("deadline_minutes would move the deadline from %s back to %s; use extend_minutes to add time, or allow_shorten to shorten it",
		e.Current.UTC().Format(time.RFC3339), e.Asked.UTC().Format(time.RFC3339))
}

// Unwrap lets errors.Is(err, ErrDeadlineShortened) match.
func (e *ShortenError) Unwrap() error { return ErrDeadlineShortened }

// EffectiveDeadline is the deadline a client should see at now. While a
// sandbox is suspended its deadline clock is paused: the stored deadline
// moves by the time spent suspended when it wakes, so the effective one
// moves with the clock until then, never past the lifetime cap.
func EffectiveDeadline(sb store.Sandbox, now time.Time, maxLifetime time.Duration) time.Time {
	d := sb.DeadlineAt
	if p := paused(sb, now); p > 0 {
		d = d.Add(p)
		if limit := sb.CreatedAt.Add(maxLifetime); d.After(limit) {
			d = limit
		}
	}
	return d.UTC()
}

// paused is how long sb's deadline clock has been stopped at now.
func paused(sb store.Sandbox, now time.Time) time.Duration {
	switch sb.State {
	case store.StateSuspending, store.StateSuspended, store.StateRestoring:
		if sb.SuspendedAt != nil {
			return max(now.Sub(*sb.SuspendedAt), 0)
		}
	}
	return 0
}

func (ch DeadlineChange) validate(m *Manager) error {
	switch {
	case ch.ExtendMinutes != nil && ch.DeadlineMinutes != nil:
		return invalid("extend_minutes", "cannot be combined with deadline_minutes")
	case ch.ExtendMinutes != nil:
		if ch.AllowShorten {
			return invalid("allow_shorten", "applies to deadline_minutes only")
		}
		return m.checkMinutes("extend_minutes", *ch.ExtendMinutes)
	case ch.DeadlineMinutes != nil:
		return m.checkMinutes("deadline_minutes", *ch.DeadlineMinutes)
	}
	return invalid("extend_minutes", "or deadline_minutes is required")
}

// ChangeDeadline extends or sets a live sandbox's deadline (see
// DeadlineChange), within the lifetime cap from creation. The change and
// its event commit under the sandbox's row lock.
func (m *Manager) ChangeDeadline(ctx context.Context, acct store.Account, id string, ch DeadlineChange) (store.Sandbox, error) {
	if err := ch.validate(m); err != nil {
		return store.Sandbox{}, err
	}
	return m.Patch(ctx, acct, id, Patch{DeadlineChange: ch})
}

// changeDeadlineLocked applies ch to sb, locked in tx, and records its
// event; the caller writes the row.
func (m *Manager) changeDeadlineLocked(ctx context.Context, tx store.Tx, acct store.Account, sb *store.Sandbox, ch DeadlineChange) error {
	switch sb.State {
	case store.StatePending, store.StateReady, store.StateSuspended, store.StateSuspending, store.StateRestoring:
	default:
		return &StateError{State: string(sb.State), Action: "extend"}
	}
	now := m.now().UTC().Truncate(time.Microsecond)
	limit := sb.CreatedAt.Add(m.cfg.MaxLifetime)
	current := EffectiveDeadline(*sb, now, m.cfg.MaxLifetime)
	var target time.Time
	note := ""
	if ch.ExtendMinutes != nil {
		target = current.Add(time.Duration(*ch.ExtendMinutes) * time.Minute)
		if target.After(limit) {
			target, note = limit, " (the lifetime cap)"
		}
	} else {
		target = now.Add(time.Duration(*ch.DeadlineMinutes) * time.Minute)
		if target.After(limit) {
			return invalid("deadline_minutes", "would pass the %s lifetime cap (%s)", m.cfg.MaxLifetime, limit.Format(time.RFC3339))
		}
		if target.Before(current) && !ch.AllowShorten {
			return &ShortenError{Current: current, Asked: target}
		}
	}
	// A paused clock adds the pause on wake: store what makes the
	// effective deadline the target.
	sb.DeadlineAt = target.Add(-paused(*sb, now))
	return tx.InsertEvent(ctx, store.Event{
		SandboxID: sb.ID, AccountID: sb.AccountID, Type: "deadline", State: sb.State,
		Actor: "account:" + acct.ID, Message: "deadline set to " + target.Format(time.RFC3339) + note, At: now,
	})
}
