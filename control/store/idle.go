package store

import "time"

// IdleCandidate is a ready sandbox the idle detector weighs: when its
// current compute session began (the floor of its idle time, since a
// freshly woken sandbox has no activity yet) and its account's override of
// the idle timeout.
type IdleCandidate struct {
	SandboxID    string
	AccountID    string
	ComputeSince time.Time
	// IdleTimeout is the account's override; 0 means the default.
	IdleTimeout time.Duration
	// OwnIdleTimeout is the sandbox's own (idle_timeout_minutes); 0 means
	// the account's. IgnoreBusy: running work does not keep it awake.
	OwnIdleTimeout time.Duration
	IgnoreBusy     bool
}
