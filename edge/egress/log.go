package egress

import (
	"sync"
	"time"
)

// Verdict is what the gateway decided about one request.
type Verdict string

// The verdicts, also the values of the decisions metric's label.
const (
	// Allowed: the gateway dialed the destination and relayed.
	Allowed Verdict = "allowed"
	// Denied: the policy or the refused ranges said no (403).
	Denied Verdict = "denied"
	// Failed: allowed, but the name did not resolve or the dial failed
	// (502).
	Failed Verdict = "failed"
	// Unauthenticated: no valid proxy credential (407). Not recorded per
	// sandbox, since no sandbox is known.
	Unauthenticated Verdict = "unauthenticated"
)

// Decision is one request's record in a sandbox's egress log. An
// allowed one is recorded when its connection ends, with the bytes it
// carried; the others when they are decided.
type Decision struct {
	Time      time.Time `json:"time"` // when the request arrived
	SandboxID string    `json:"sandbox_id"`
	Host      string    `json:"host"` // as asked for: a name or an IP literal
	Port      uint16    `json:"port"`
	Addr      string    `json:"addr,omitempty"` // the address dialed
	Verdict   Verdict   `json:"verdict"`
	Reason    string    `json:"reason,omitempty"` // why, in words; for an allowed one, why it ended early if it did
	BytesUp   int64     `json:"bytes_up"`         // sandbox to destination
	BytesDown int64     `json:"bytes_down"`       // destination to sandbox
}

// Recorder keeps decisions per sandbox. Record must not block for long:
// the gateway calls it on the request's path.
type Recorder interface {
	Record(d Decision)
}

// MemoryLog is a Recorder that keeps the last PerSandbox decisions of
// each sandbox in memory, on this replica only: the first step, until
// the log is shipped to control. Forget drops a sandbox's ring.
type MemoryLog struct {
	PerSandbox int // default 256

	mu    sync.Mutex // guards rings
	rings map[string]*ring
}

type ring struct {
	buf  []Decision
	next int // where the next decision goes
	full bool
}

var _ Recorder = (*MemoryLog)(nil)

// Record appends d to its sandbox's ring, dropping the oldest when full.
func (l *MemoryLog) Record(d Decision) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rings == nil {
		l.rings = map[string]*ring{}
	}
	r := l.rings[d.SandboxID]
	if r == nil {
		n := l.PerSandbox
		if n <= 0 {
			n = 256
		}
		r = &ring{buf: make([]Decision, n)}
		l.rings[d.SandboxID] = r
	}
	r.buf[r.next] = d
	r.next = (r.next + 1) % len(r.buf)
	if r.next == 0 {
		r.full = true
	}
}

// Recent returns up to limit of a sandbox's decisions, newest first,
// skipping the newest offset ones (for paging).
func (l *MemoryLog) Recent(sandboxID string, offset, limit int) []Decision {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.rings[sandboxID]
	if r == nil || limit <= 0 || offset < 0 {
		return nil
	}
	n := r.next
	if r.full {
		n = len(r.buf)
	}
	var out []Decision
	for i := offset; i < n && len(out) < limit; i++ {
		out = append(out, r.buf[(r.next-1-i+len(r.buf))%len(r.buf)])
	}
	return out
}

// Forget drops a sandbox's decisions, as when it ends.
func (l *MemoryLog) Forget(sandboxID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.rings, sandboxID)
}
