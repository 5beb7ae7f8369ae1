package lifecycle

import (
	"context"
	"fmt"

	"github.com/sbxedge/sbx/control/store"
)

// Admit enforces the account rules, the one place they live: the
// `sandboxes` feature flag, the optional platform allowlist and the
// concurrency limit. Create calls it for every new sandbox; waking a
// suspended sandbox must call it too (a suspended sandbox does not count,
// because it holds no pod, so a wake takes a slot like a create).
//
// It must run inside the transaction that makes the sandbox count (the
// insert in pending, or the move to restoring): it takes the account lock
// (pg_advisory_xact_lock on Postgres; SQLite transactions are already
// serialised), which is held until that transaction ends, so racing
// callers see each other's rows and exactly the limit is admitted. The
// account is read inside the lock, so an operator's change applies at
// once.
func (m *Manager) Admit(ctx context.Context, tx store.Tx, accountID, platform string) error {
	return m.admit(ctx, tx, accountID, platform, false)
}

// admitInserted is Admit as the last step of a transaction that has
// already inserted its sandbox in pending, so the count includes it.
// Create takes the account lock this late because the lock is held until
// commit: taken first, it serialised every statement of every create in
// the account (insert, grants, event, the job) behind one another, and
// concurrent creates queued on it. Taken last, only the count and the
// commit are serialised; the count's fresh snapshot, taken after the lock
// is granted, still sees every earlier create's committed row.
func (m *Manager) admitInserted(ctx context.Context, tx store.Tx, accountID, platform string) error {
	return m.admit(ctx, tx, accountID, platform, true)
}

func (m *Manager) admit(ctx context.Context, tx store.Tx, accountID, platform string, inserted bool) error {
	acct, n, err := tx.LockAccountHolding(ctx, accountID)
	if err != nil {
		return err
	}
	if !acct.SandboxesEnabled {
		m.metrics.quotaRefusals.WithLabelValues("feature_disabled").Inc()
		return ErrDisabled
	}
	if len(acct.AllowedPlatforms) > 0 && !contains(acct.AllowedPlatforms, platform) {
		m.metrics.quotaRefusals.WithLabelValues("platform").Inc()
		return fmt.Errorf("%w: %s (allowed: %v)", ErrPlatformNotAllowed, platform, acct.AllowedPlatforms)
	}
	if inserted {
		n-- // this transaction's own sandbox
	}
	if n >= acct.ConcurrentLimit {
		m.metrics.quotaRefusals.WithLabelValues("concurrency").Inc()
		return fmt.Errorf("%w: %d of %d sandboxes in use", ErrLimit, n, acct.ConcurrentLimit)
	}
	return nil
}

// Admission is the answer to "may a connection to this sandbox proceed,
// wake it, or be refused", for every surface that opens one (the SSH
// broker, the preview proxy, the API's exec, files and streams, the
// credentials and ports handed out to reach it later). It is the one
// place the states are sorted that way: callers switch on the answer,
// never on a state.
type Admission uint8

const (
	// Ended (terminating, terminated, failed): refuse. Nothing makes the
	// sandbox ready again; the advice that helps is "create another".
	Ended Admission = iota + 1
	// Starting (pending): wait. The sandbox becomes ready by itself once
	// provisioned; waking it would only wait too.
	Starting
	// Wakeable (suspending, suspended, restoring): asleep, or on its way
	// in or out. Traffic asks for a wake (Manager.Wake) and waits.
	Wakeable
	// Ready (ready): proceed now; the sandbox has a running server.
	Ready
)

// AdmissionOf answers for sb as it was read. A caller that must not race
// a concurrent end asks again under the sandbox's row lock (see
// Reachable).
func AdmissionOf(sb store.Sandbox) Admission {
	switch sb.State {
	case store.StateReady:
		return Ready
	case store.StatePending:
		return Starting
	case store.StateSuspending, store.StateSuspended, store.StateRestoring:
		return Wakeable
	}
	// Terminating, terminated, failed, and a state this build does not
	// know (a newer replica's): refusing is the safe reading.
	return Ended
}

func (a Admission) String() string {
	switch a {
	case Ended:
		return "ended"
	case Starting:
		return "starting"
	case Wakeable:
		return "wakeable"
	case Ready:
		return "ready"
	}
	return fmt.Sprintf("Admission(%d)", uint8(a))
}
