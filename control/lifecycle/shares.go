package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/sbxedge/sbx/auth/token"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/edgeapi"
)

// Share link bounds: a link lives from one minute to one week, the most a
// reviewer without an account should hold one port open for; a note is a
// line for the list, not a document.
const (
	MaxShareMinutes = 7 * 24 * 60
	MaxShareNote    = 200
)

// ErrShareNotFound: no share link of that ID on the sandbox.
var ErrShareNotFound = errors.New("share link not found")

// Refusals of a share link at the edge, declared for both sides in
// internal/edgeapi.
var (
	ErrShareUnknown = edgeapi.ErrPreviewShareUnknown
	ErrShareRevoked = edgeapi.ErrPreviewShareRevoked
	ErrShareExpired = edgeapi.ErrPreviewShareExpired
)

// NewShare is a freshly created share link. Secret exists only here: the
// store keeps its hash.
type NewShare struct {
	store.Share
	Secret string
}

// ShareSpec is what CreateShare is asked for.
type ShareSpec struct {
	Port    int
	Minutes int
	Note    string
}

// CreateShare makes a share link to an exposed port of acct's sandbox,
// valid for spec.Minutes, audited with caller (the agent token asking). A
// sandbox that ended has nothing to share.
func (m *Manager) CreateShare(ctx context.Context, acct store.Account, caller, id string, spec ShareSpec) (NewShare, error) {
	if spec.Minutes < 1 || spec.Minutes > MaxShareMinutes {
		return NewShare{}, invalid("expires_in_minutes", "must be from 1 to %d (one week)", MaxShareMinutes)
	}
	if utf8.RuneCountInString(spec.Note) > MaxShareNote || !utf8.ValidString(spec.Note) {
		return NewShare{}, invalid("note", "must be valid text of at most %d characters", MaxShareNote)
	}
	if _, err := m.Get(ctx, acct, id); err != nil {
		return NewShare{}, err
	}
	secret, hash := token.New(token.PrefixShare)
	now := m.now().UTC().Truncate(time.Microsecond)
	sh := store.Share{
		ID: newPrefixedID("shr-"), SandboxID: id, AccountID: acct.ID, Port: spec.Port, Hash: hash,
		Note: spec.Note, CreatedBy: caller, CreatedAt: now, ExpiresAt: now.Add(time.Duration(spec.Minutes) * time.Minute),
	}
	err := m.underLock(ctx, id, "share a port of", func(tx store.Tx, sb store.Sandbox) (store.Event, error) {
		if _, err := exposedPort(ctx, tx, id, spec.Port); err != nil {
			return store.Event{}, err
		}
		if err := tx.InsertShare(ctx, sh); err != nil {
			return store.Event{}, err
		}
		msg := fmt.Sprintf("share link %s to port %d until %s", sh.ID, sh.Port, sh.ExpiresAt.Format(time.RFC3339))
		if err := m.auditShare(ctx, tx, sh, caller, "share_create", msg, now); err != nil {
			return store.Event{}, err
		}
		return store.Event{Type: "preview_share", Actor: "account:" + acct.ID, At: now, Message: msg}, nil
	})
	if err != nil {
		return NewShare{}, err
	}
	return NewShare{Share: sh, Secret: secret}, nil
}

// Shares lists the share links of acct's sandbox, newest first.
func (m *Manager) Shares(ctx context.Context, acct store.Account, id string) ([]store.Share, error) {
	if _, err := m.Get(ctx, acct, id); err != nil {
		return nil, err
	}
	return m.store.Shares(ctx, id)
}

// RevokeShare revokes a share link to port of acct's sandbox and returns it, so
// the caller can tell the edges; revoking twice is no error. The sandbox
// may be in any state.
func (m *Manager) RevokeShare(ctx context.Context, acct store.Account, caller, id string, port int, shareID string) (store.Share, error) {
	if _, err := m.Get(ctx, acct, id); err != nil {
		return store.Share{}, err
	}
	var sh store.Share
	err := m.underLock(ctx, id, "", func(tx store.Tx, _ store.Sandbox) (store.Event, error) {
		var err error
		if sh, err = tx.ShareByID(ctx, shareID); errors.Is(err, store.ErrNotFound) || (err == nil && (sh.SandboxID != id || sh.Port != port)) {
			return store.Event{}, ErrShareNotFound
		} else if err != nil {
			return store.Event{}, err
		}
		now := m.now().UTC()
		if err := tx.RevokeShare(ctx, shareID, now); err != nil {
			return store.Event{}, err
		}
		if sh.RevokedAt == nil {
			sh.RevokedAt = &now
		}
		msg := fmt.Sprintf("share link %s to port %d revoked", sh.ID, sh.Port)
		if err := m.auditShare(ctx, tx, sh, caller, "share_revoke", msg, now); err != nil {
			return store.Event{}, err
		}
		return store.Event{Type: "preview_share", Actor: "account:" + acct.ID, At: now, Message: msg}, nil
	})
	return sh, err
}

// RedeemShare exchanges a share link's secret, presented on the preview
// host label, for the share it opens. The first redemption is audited.
// The link must name the port label leads to: a share opens that one
// port only. A secret of no share, or of another host, is ErrShareUnknown;
// a revoked or expired one ErrShareRevoked or ErrShareExpired.
func (m *Manager) RedeemShare(ctx context.Context, label, secret string) (store.Share, error) {
	if p, err := token.Parse(secret); err != nil || p != token.PrefixShare {
		return store.Share{}, ErrShareUnknown
	}
	sh, err := m.store.ShareByHash(ctx, token.Hash(secret))
	if err != nil {
		return store.Share{}, shareLookup(err)
	}
	if sh, err = m.checkShare(ctx, sh, label); err != nil {
		return store.Share{}, err
	}
	if sh.FirstUsedAt != nil {
		return sh, nil
	}
	now := m.now().UTC()
	err = m.store.InTx(ctx, func(tx store.Tx) error {
		first, err := tx.MarkShareUsed(ctx, sh.ID, now)
		if err != nil || !first {
			return err
		}
		return m.auditShare(ctx, tx, sh, "share:"+sh.ID, "share_first_use",
			fmt.Sprintf("share link %s to port %d opened for the first time", sh.ID, sh.Port), now)
	})
	return sh, err
}

// CheckShare reports whether the share link shareID still opens the port
// label leads to, with RedeemShare's refusals.
func (m *Manager) CheckShare(ctx context.Context, label, shareID string) (store.Share, error) {
	sh, err := m.store.ShareByID(ctx, shareID)
	if err != nil {
		return store.Share{}, shareLookup(err)
	}
	return m.checkShare(ctx, sh, label)
}

func shareLookup(err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return ErrShareUnknown
	}
	return fmt.Errorf("look up share: %w", err)
}

// checkShare admits sh on the preview host label, or says why not.
func (m *Manager) checkShare(ctx context.Context, sh store.Share, label string) (store.Share, error) {
	p, err := m.store.PreviewPortByLabel(ctx, label)
	if errors.Is(err, store.ErrNotFound) {
		return store.Share{}, ErrShareUnknown
	}
	if err != nil {
		return store.Share{}, fmt.Errorf("look up preview host: %w", err)
	}
	if p.SandboxID != sh.SandboxID || p.Port != sh.Port || p.AccountID != sh.AccountID {
		return store.Share{}, ErrShareUnknown
	}
	switch now := m.now(); {
	case sh.RevokedAt != nil:
		return store.Share{}, ErrShareRevoked
	case !now.Before(sh.ExpiresAt):
		return store.Share{}, ErrShareExpired
	}
	return sh, nil
}

func (m *Manager) auditShare(ctx context.Context, tx store.Tx, sh store.Share, caller, action, msg string, at time.Time) error {
	return tx.InsertAudit(ctx, store.AuditEntry{
		AccountID: sh.AccountID, SandboxID: sh.SandboxID, Caller: caller, Action: action, Message: msg, At: at,
	})
}

// exposedPort finds port among the sandbox's exposed ports, or
// ErrPortNotFound.
func exposedPort(ctx context.Context, tx store.Tx, id string, port int) (store.PreviewPort, error) {
	ps, err := tx.PreviewPorts(ctx, id)
	if err != nil {
		return store.PreviewPort{}, err
	}
	for _, p := range ps {
		if p.Port == port {
			return p, nil
		}
	}
	return store.PreviewPort{}, ErrPortNotFound
}
