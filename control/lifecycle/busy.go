package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/initproto"
)

// Idleness that knows about work: a sandbox idle by its connections and
// marks may still be working (a build started with nohup over an SSH
// session that has closed, an exec still running, a service compiling).
// Before the idle detector suspends one whose keep_awake_while_busy is
// on, it asks the sandbox's init; work found counts as activity (so the
// idle clock starts again when the work ends), and an init that cannot
// be asked leaves the sandbox awake this round: missing data is never
// idle. Only a sandbox with no init at all (ErrNoInit) is judged on its
// activity alone, as nothing in it could ever say.

// busyCallTimeout bounds one busy question (the init samples CPU for a
// quarter second of it).
const busyCallTimeout = 5 * time.Second

// busyAsks bounds the busy questions one idle check has in flight.
const busyAsks = 8

// busyVerdict is what the idle detector learns from a sandbox's init.
type busyVerdict struct {
	busy    bool
	unknown bool
	why     string
}

// busyOf asks the sandbox's init about work and weighs the answer.
func (m *Manager) busyOf(ctx context.Context, id string) busyVerdict {
	sb, err := m.store.Sandbox(ctx, id)
	if err != nil {
		return busyVerdict{unknown: true, why: fmt.Sprintf("read sandbox: %v", err)}
	}
	ctx, cancel := context.WithTimeout(ctx, busyCallTimeout)
	defer cancel()
	c, err := m.initClient(ctx, sb)
	if err != nil {
		return busyVerdict{unknown: true, why: err.Error()}
	}
	b, err := c.Busy(ctx)
	if errors.Is(err, initproto.ErrNoInit) {
		return busyVerdict{}
	}
	if err != nil {
		return busyVerdict{unknown: true, why: err.Error()}
	}
	return weighBusy(b, m.cfg.BusyCPU)
}

// weighBusy is the rule: any process that is not a service, or CPU use
// at or above threshold cores, is work.
func weighBusy(b initproto.Busy, threshold float64) busyVerdict {
	if len(b.Processes) > 0 {
		p := b.Processes[0]
		return busyVerdict{busy: true, why: fmt.Sprintf("%d processes running (%s, pid %d)", len(b.Processes), p.Command, p.PID)}
	}
	if b.CPU >= threshold {
		return busyVerdict{busy: true, why: fmt.Sprintf("CPU use %.2f cores", b.CPU)}
	}
	return busyVerdict{}
}

// stillBusy returns, of the sandboxes the idle detector would suspend,
// those it must not: working, or not known not to be. Candidates that
// opted out (IgnoreBusy) are not asked; without a way to reach inits
// (no pool) none are.
func (m *Manager) stillBusy(ctx context.Context, cands []store.IdleCandidate) map[string]bool {
	out := map[string]bool{}
	if m.pods == nil {
		return out
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, busyAsks)
	for _, c := range cands {
		if c.IgnoreBusy {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			v := m.busyOf(ctx, c.SandboxID)
			switch {
			case v.busy:
				// Work is activity: the idle clock starts again when
				// it ends.
				m.act.Mark(c.SandboxID)
				m.log.DebugContext(ctx, "idle sandbox is working; kept awake", "sandbox_id", c.SandboxID, "why", v.why)
			case v.unknown:
				m.metrics.idleCheckErrors.Inc()
				m.log.WarnContext(ctx, "could not ask an idle sandbox about work; kept awake this round", "sandbox_id", c.SandboxID, "err", v.why)
			default:
				return
			}
			mu.Lock()
			out[c.SandboxID] = true
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}
