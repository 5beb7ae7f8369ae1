package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/egresspolicy"
)

// Patch is PATCH /sandboxes/{id} after JSON decoding: any of a deadline
// change (at most one of its two forms), the wake flag and the labels.
// Fields left out are left alone.
type Patch struct {
	DeadlineChange
	// WakeOnTraffic false keeps the sandbox suspended when traffic comes
	// while it is suspended; true (the default) lets traffic wake it.
	WakeOnTraffic *bool `json:"wake_on_traffic,omitempty"`
	// Labels replaces the sandbox's labels ({} removes them all).
	Labels *map[string]string `json:"labels,omitempty"`
	// Network replaces the sandbox's egress policy (within its
	// profile's); it applies to new connections within seconds, and
	// open ones it no longer allows are closed.
	Network *egresspolicy.Spec `json:"network,omitempty"`
	// IdleTimeoutMinutes, KeepAwakeWhileBusy and RetentionDays are the
	// create's idleness settings, under the same bounds (validateIdle).
	// A retention change counts from when the sandbox was suspended, and
	// re-arms its last-day warning.
	IdleTimeoutMinutes *int  `json:"idle_timeout_minutes,omitempty"`
	KeepAwakeWhileBusy *bool `json:"keep_awake_while_busy,omitempty"`
	RetentionDays      *int  `json:"retention_days,omitempty"`
}

func (p Patch) hasIdle() bool {
	return p.IdleTimeoutMinutes != nil || p.KeepAwakeWhileBusy != nil || p.RetentionDays != nil
}

func (p Patch) hasDeadline() bool {
	return p.ExtendMinutes != nil || p.DeadlineMinutes != nil || p.AllowShorten
}

func (p Patch) validate(m *Manager) error {
	if !p.hasDeadline() && p.WakeOnTraffic == nil && p.Labels == nil && p.Network == nil && !p.hasIdle() {
		return invalid("extend_minutes", "or deadline_minutes, wake_on_traffic, labels, network, idle_timeout_minutes, keep_awake_while_busy or retention_days is required")
	}
	if p.hasDeadline() {
		if err := p.DeadlineChange.validate(m); err != nil {
			return err
		}
	}
	if p.Labels != nil {
		return validateLabels(*p.Labels)
	}
	return nil
}

// Patch changes what p names of a sandbox that has not ended, in one
// transaction under its row lock with an event per change.
func (m *Manager) Patch(ctx context.Context, acct store.Account, idOrName string, p Patch) (store.Sandbox, error) {
	if err := p.validate(m); err != nil {
		return store.Sandbox{}, err
	}
	cur, err := m.Resolve(ctx, acct, idOrName)
	if err != nil {
		return store.Sandbox{}, err
	}
	// Bounded by the account's idle timeout as at create; read before the
	// transaction, as create does.
	idle, retention, err := m.validateIdle(ctx, cur.AccountID, p.IdleTimeoutMinutes, p.RetentionDays)
	if err != nil {
		return store.Sandbox{}, err
	}
	var out store.Sandbox
	err = m.store.InTx(ctx, func(tx store.Tx) error {
		sb, err := tx.SandboxForUpdate(ctx, cur.ID)
		if err != nil {
			return err
		}
		if p.hasDeadline() {
			if err := m.changeDeadlineLocked(ctx, tx, acct, &sb, p.DeadlineChange); err != nil {
				return err
			}
		} else if sb.State.Final() || sb.State == store.StateTerminating {
			return &StateError{State: string(sb.State), Action: "change"}
		}
		var changed []string
		if p.WakeOnTraffic != nil {
			sb.NoWakeOnTraffic = !*p.WakeOnTraffic
			changed = append(changed, fmt.Sprintf("wake_on_traffic=%t", *p.WakeOnTraffic))
		}
		if p.Labels != nil {
			sb.Labels = maps.Clone(*p.Labels)
			changed = append(changed, "labels")
		}
		changed = append(changed, applyIdle(&sb, p, idle, retention)...)
		if p.Network != nil {
			n, err := m.narrowNetwork(sb.Profile, p.Network)
			if err != nil {
				return err
			}
			sb.Network = n
			changed = append(changed, "network="+describeNetwork(*n))
		}
		if err := tx.UpdateSandbox(ctx, sb); err != nil {
			return err
		}
		out = sb
		if len(changed) == 0 {
			return nil
		}
		return tx.InsertEvent(ctx, store.Event{
			SandboxID: sb.ID, AccountID: sb.AccountID, Type: "settings", State: sb.State,
			Actor: "account:" + acct.ID, Message: "set " + strings.Join(changed, ", "), At: m.now().UTC(),
		})
	})
	if errors.Is(err, store.ErrNotFound) {
		return store.Sandbox{}, ErrNotFound
	}
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("patch sandbox %s: %w", cur.ID, err)
	}
	if p.Network != nil {
		// The edges hear it as a sandbox change: the egress gateway drops
		// its cached policy and closes the open connections the new one
		// refuses.
		if err := m.act.Publish(context.WithoutCancel(ctx), out.ID); err != nil {
			m.log.WarnContext(ctx, "tell the edge of a network policy change", "sandbox_id", out.ID, "err", err)
		}
		// Below the proxy: a provider that enforces the mode itself
		// (Kubernetes: the pod's sbx.dev/egress label, which the
		// NetworkPolicy selects on) applies it to the running sandbox.
		// A sandbox without one gets it from the spec when it resumes.
		if s, ok := m.prov.(egressSetter); ok {
			if err := s.SetEgress(context.WithoutCancel(ctx), out.ID, string(m.SandboxNetwork(out).Mode())); err != nil {
				m.log.WarnContext(ctx, "apply a network policy change to the sandbox's pod", "sandbox_id", out.ID, "err", err)
			}
		}
	}
	return out, nil
}

// egressSetter is a provider that enforces the egress mode below the
// proxy (control/provider/k8s.EgressSetter).
type egressSetter interface {
	SetEgress(ctx context.Context, sandboxID, mode string) error
}

// Label bounds: a label is a small tag, not a place to store data.
const (
	maxLabels        = 32
	maxLabelKeyLen   = 63
	maxLabelValueLen = 255
)

func labelKeyOK(k string) bool {
	if k == "" || len(k) > maxLabelKeyLen {
		return false
	}
	for _, c := range k {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.', c == '/':
		default:
			return false
		}
	}
	return true
}

// validateLabels bounds a label map: at most 32 labels, keys of letters,
// digits and - _ . / (1 to 63 bytes), values of printable text up to 255
// bytes.
func validateLabels(labels map[string]string) error {
	if len(labels) > maxLabels {
		return invalid("labels", "has %d labels; at most %d are allowed", len(labels), maxLabels)
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if !labelKeyOK(k) {
			return invalid("labels", "key %q must be 1 to %d letters, digits, '-', '_', '.' or '/'", k, maxLabelKeyLen)
		}
		v := labels[k]
		if len(v) > maxLabelValueLen || strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return invalid("labels", "value of %q must be at most %d bytes of printable text", k, maxLabelValueLen)
		}
	}
	return nil
}

// ParseLabelFilter reads a ?label=k=v query value.
func ParseLabelFilter(s string) (k, v string, err error) {
	k, v, ok := strings.Cut(s, "=")
	if !ok || !labelKeyOK(k) {
		return "", "", invalid("label", "must be key=value with a label key (letters, digits, '-', '_', '.' or '/')")
	}
	return k, v, nil
}

// describeNetwork is a policy in a few words, for events.
func describeNetwork(s egresspolicy.Spec) string {
	if len(s.Allow) == 0 {
		return string(s.Egress)
	}
	return string(s.Egress) + " (" + strings.Join(s.Allow, ", ") + ")"
}

// applyIdle sets the idleness settings p names (idle and retention
// already validated) and says what changed, for the settings event.
func applyIdle(sb *store.Sandbox, p Patch, idle time.Duration, retention int) []string {
	var changed []string
	if p.IdleTimeoutMinutes != nil {
		sb.IdleTimeout = idle
		changed = append(changed, fmt.Sprintf("idle_timeout_minutes=%d", *p.IdleTimeoutMinutes))
	}
	if p.KeepAwakeWhileBusy != nil {
		sb.IgnoreBusy = !*p.KeepAwakeWhileBusy
		changed = append(changed, fmt.Sprintf("keep_awake_while_busy=%t", *p.KeepAwakeWhileBusy))
	}
	if p.RetentionDays != nil {
		sb.RetentionDays = retention
		// A new retention gets its own last-day warning.
		sb.RetentionWarnedAt = nil
		changed = append(changed, fmt.Sprintf("retention_days=%d", retention))
	}
	return changed
}
