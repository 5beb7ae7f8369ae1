package webhook

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

// Message is the JSON body of a delivery: the Standard Webhooks envelope
// (type, timestamp, data) with the event's ID and account beside it.
type Message struct {
	ID        string    `json:"id"`
	Type      string    `json:"type"`
	Timestamp time.Time `json:"timestamp"`
	AccountID string    `json:"account_id"`
	Data      Data      `json:"data"`
}

// Data is one transition with the fields the sand-boxer hub reads for it:
// profile, provider and host always; reachability on ready; duration and
// cleanup on terminated; the error on failed; the consumer block always.
type Data struct {
	SandboxID string         `json:"sandbox_id"`
	Name      string         `json:"name,omitempty"`
	State     store.State    `json:"state"`
	Reason    string         `json:"reason,omitempty"`
	Actor     string         `json:"actor,omitempty"`
	Profile   string         `json:"profile"`
	Platform  string         `json:"platform"`
	Provider  string         `json:"provider"`
	Host      string         `json:"host,omitempty"`
	Consumer  store.Consumer `json:"consumer"`
	// Reachability is set on sandbox.ready.
	Reachability *Reachability `json:"reachability,omitempty"`
	// DurationS and Cleanup are set on sandbox.terminated.
	DurationS *float64 `json:"duration_s,omitempty"`
	Cleanup   *Cleanup `json:"cleanup,omitempty"`
	// Error is set on sandbox.failed.
	Error      string     `json:"error,omitempty"`
	Timestamps Timestamps `json:"timestamps"`
}

// Reachability points at the ways in; nothing in it is a credential.
type Reachability struct {
	SSH       string `json:"ssh"` // user@host:port, for ssh -p or an SSH config
	SSHHost   string `json:"ssh_host"`
	SSHPort   int    `json:"ssh_port"`
	Username  string `json:"username"`
	Workspace string `json:"workspace,omitempty"`
}

// Cleanup is the report of a teardown: the provider released the pod,
// workspace and snapshots (sandbox.terminated is written only after it
// did), and the billing lines closed, with their totals.
type Cleanup struct {
	ResourcesReleased bool    `json:"resources_released"`
	EndReason         string  `json:"end_reason"`
	ComputeS          float64 `json:"compute_s"`
	StorageS          float64 `json:"storage_s"`
	OpenSessions      int     `json:"open_sessions"`
}

// Timestamps are the sandbox's own.
type Timestamps struct {
	CreatedAt    time.Time  `json:"created_at"`
	ReadyAt      *time.Time `json:"ready_at,omitempty"`
	SuspendedAt  *time.Time `json:"suspended_at,omitempty"`
	TerminatedAt *time.Time `json:"terminated_at,omitempty"`
	DeadlineAt   time.Time  `json:"deadline_at"`
}

// message builds the body of ev for sb as it is after the transition.
func (h *Hub) message(id string, ev store.Event, sb store.Sandbox, sessions []store.Session) ([]byte, error) {
	d := Data{
		SandboxID: sb.ID, Name: sb.Name, State: ev.State, Reason: ev.Reason, Actor: ev.Actor,
		Profile: sb.Profile, Platform: sb.Platform, Provider: h.cfg.Provider, Host: h.cfg.Host,
		Consumer: sb.Consumer,
		Timestamps: Timestamps{CreatedAt: sb.CreatedAt, ReadyAt: sb.ReadyAt, SuspendedAt: sb.SuspendedAt,
			TerminatedAt: sb.TerminatedAt, DeadlineAt: sb.DeadlineAt},
	}
	switch ev.State {
	case store.StateReady:
		d.Reachability = &Reachability{
			SSH:     fmt.Sprintf("%s@%s:%d", sb.ID, h.cfg.SSHHost, h.cfg.SSHPort),
			SSHHost: h.cfg.SSHHost, SSHPort: h.cfg.SSHPort, Username: sb.ID, Workspace: sb.Workspace,
		}
	case store.StateTerminated:
		end := ev.At
		if sb.TerminatedAt != nil {
			end = *sb.TerminatedAt
		}
		dur := end.Sub(sb.CreatedAt).Seconds()
		d.DurationS = &dur
		c := &Cleanup{ResourcesReleased: true, EndReason: sb.EndReason}
		for _, s := range sessions {
			if s.EndedAt == nil {
				c.OpenSessions++
				continue
			}
			secs := s.EndedAt.Sub(s.StartedAt).Seconds()
			if s.Kind == store.SessionStorage {
				c.StorageS += secs
			} else {
				c.ComputeS += secs
			}
		}
		d.Cleanup = c
	case store.StateFailed:
		d.Error = ev.Reason
		if ev.Message != "" {
			d.Error += ": " + ev.Message
		}
	}
	return json.Marshal(Message{ID: id, Type: EventType(ev.State), Timestamp: ev.At.UTC(), AccountID: sb.AccountID, Data: d})
}
