package lifecycle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sbxedge/sbx/auth/token"
	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/store"
)

// GrantScopes is the fixed scope vocabulary a grant may use.
var GrantScopes = []string{"cache:read", "cache:write", "registry:read", "registry:write"}

// GrantsPath is where a sandbox finds its grant tokens, relative to its
// home directory (mode 0600, written before the sandbox turns ready).
// Its content is GrantsFile as JSON.
const GrantsPath = ".config/tuist/grants.json"

// maxGrants bounds one request; a sandbox needs a handful at most.
const maxGrants = 16

// GrantsFile is the document at GrantsPath. It holds no expiry: a token
// lives as long as its sandbox and until the sandbox's deadline, which
// can be extended; ask the introspection endpoint for the current one.
type GrantsFile struct {
	Version   int               `json:"version"`
	SandboxID string            `json:"sandbox_id"`
	Grants    []GrantsFileEntry `json:"grants"`
}

// GrantsFileEntry is one minted grant inside the sandbox.
type GrantsFileEntry struct {
	ID        string   `json:"id"`
	ProjectID string   `json:"project_id"`
	Scopes    []string `json:"scopes"`
	Token     string   `json:"token"`
}

// validateGrants checks every grant names a project of acct and only
// known scopes, and returns them normalised (scopes sorted, deduplicated
// refused). The first bad entry is named in the error.
func (m *Manager) validateGrants(ctx context.Context, accountID string, grants []store.Grant) ([]store.Grant, error) {
	if len(grants) > maxGrants {
		return nil, invalid("grants", "at most %d grants per sandbox", maxGrants)
	}
	out := make([]store.Grant, 0, len(grants))
	for i, g := range grants {
		field := fmt.Sprintf("grants[%d]", i)
		if g.ProjectID == "" {
			return nil, invalid(field+".project_id", "is required")
		}
		p, err := m.store.Project(ctx, g.ProjectID)
		if errors.Is(err, store.ErrNotFound) || (err == nil && p.AccountID != accountID) {
			// Another account's project reads as unknown, so grants
			// cannot probe which projects exist.
			return nil, invalid(field+".project_id", "no project %q in this account", g.ProjectID)
		}
		if err != nil {
			return nil, fmt.Errorf("look up project %s: %w", g.ProjectID, err)
		}
		if len(g.Scopes) == 0 {
			return nil, invalid(field+".scopes", "must name at least one of %s", strings.Join(GrantScopes, ", "))
		}
		seen := map[string]bool{}
		for j, sc := range g.Scopes {
			if !slices.Contains(GrantScopes, sc) {
				return nil, invalid(fmt.Sprintf("%s.scopes[%d]", field, j), "unknown scope %q; want one of %s", sc, strings.Join(GrantScopes, ", "))
			}
			if seen[sc] {
				return nil, invalid(fmt.Sprintf("%s.scopes[%d]", field, j), "scope %q given twice", sc)
			}
			seen[sc] = true
		}
		scopes := slices.Clone(g.Scopes)
		slices.Sort(scopes)
		out = append(out, store.Grant{ProjectID: g.ProjectID, Scopes: scopes})
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// GrantAuditMessage is the audit line for one grant.
func GrantAuditMessage(sandboxID string, scopes []string, projectID, caller string) string {
	return fmt.Sprintf("sandbox %s received scopes [%s] on project %s via caller %s",
		sandboxID, strings.Join(scopes, ", "), projectID, caller)
}

// recordGrants stores a new sandbox's grants (unminted) and audits each,
// inside the create transaction.
func recordGrants(ctx context.Context, tx store.Tx, sb store.Sandbox, caller string, now time.Time) error {
	for i, g := range sb.Grants {
		if err := tx.InsertGrantToken(ctx, store.GrantToken{
			ID: newPrefixedID("grt-"), SandboxID: sb.ID, AccountID: sb.AccountID, ProjectID: g.ProjectID,
			Position: i, Scopes: g.Scopes, CreatedAt: now,
		}); err != nil {
			return err
		}
		if err := tx.InsertAudit(ctx, store.AuditEntry{
			AccountID: sb.AccountID, ProjectID: g.ProjectID, SandboxID: sb.ID, Caller: caller,
			Action: "grant", Scopes: g.Scopes, Message: GrantAuditMessage(sb.ID, g.Scopes, g.ProjectID, caller), At: now,
		}); err != nil {
			return err
		}
	}
	return nil
}

// grantFiles returns the file that carries the sandbox's grant tokens
// into it, recording each token's hash the first time (the mint). No
// grants, no file.
//
// A token is derived from control's derivation secret and the grant ID
// (like host keys), not drawn at random: a provisioning retry, a restore,
// a restart after a crash or a provider that keeps an already running pod
// all write the same token, so the copy inside the sandbox never goes
// stale against the stored hash. The database alone still yields no
// token; the secret lives with control's keys, not in the database.
func (m *Manager) grantFiles(ctx context.Context, sandboxID string) ([]provider.File, error) {
	grants, err := m.store.GrantTokens(ctx, sandboxID)
	if err != nil {
		return nil, err
	}
	if len(grants) == 0 {
		return nil, nil
	}
	doc := GrantsFile{Version: 1, SandboxID: sandboxID}
	var fresh []store.GrantToken
	for _, g := range grants {
		seed, err := m.hostKeys.Bytes("sbx grant token v1 "+g.ID, 32)
		if err != nil {
			return nil, err
		}
		secret, hash := token.FromBytes(token.PrefixGrant, [32]byte(seed))
		doc.Grants = append(doc.Grants, GrantsFileEntry{ID: g.ID, ProjectID: g.ProjectID, Scopes: g.Scopes, Token: secret})
		if !bytes.Equal(g.Hash, hash) {
			g.Hash = hash
			fresh = append(fresh, g)
		}
	}
	if len(fresh) > 0 {
		err = m.store.InTx(ctx, func(tx store.Tx) error {
			now := m.now().UTC()
			for _, g := range fresh {
				if err := tx.SetGrantTokenHash(ctx, g.ID, g.Hash, now); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("mint grant tokens of %s: %w", sandboxID, err)
		}
		m.metrics.grantMints.Add(float64(len(fresh)))
	}
	data, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode grants of %s: %w", sandboxID, err)
	}
	return []provider.File{{Path: GrantsPath, Mode: 0o600, Data: append(data, '\n')}}, nil
}

// Introspection is what a Tuist service learns about a grant token.
type Introspection struct {
	Active    bool
	GrantID   string
	SandboxID string
	AccountID string
	ProjectID string
	Scopes    []string
	ExpiresAt time.Time
}

// Introspect checks a grant token. It is active while its sandbox is live
// (pending through suspended, not terminating, terminated or failed) and
// before the sandbox's deadline; an unknown, malformed or replaced token
// is simply inactive.
func (m *Manager) Introspect(ctx context.Context, secret string) (Introspection, error) {
	if p, err := token.Parse(secret); err != nil || p != token.PrefixGrant {
		return Introspection{}, nil
	}
	g, err := m.store.GrantTokenByHash(ctx, token.Hash(secret))
	if errors.Is(err, store.ErrNotFound) {
		return Introspection{}, nil
	}
	if err != nil {
		return Introspection{}, fmt.Errorf("introspect grant token: %w", err)
	}
	sb, err := m.store.Sandbox(ctx, g.SandboxID)
	if err != nil {
		return Introspection{}, fmt.Errorf("introspect grant token: sandbox of %s: %w", g.ID, err)
	}
	if AdmissionOf(sb) == Ended || !m.now().Before(sb.DeadlineAt) {
		return Introspection{}, nil
	}
	return Introspection{
		Active: true, GrantID: g.ID, SandboxID: sb.ID, AccountID: g.AccountID, ProjectID: g.ProjectID,
		Scopes: g.Scopes, ExpiresAt: sb.DeadlineAt,
	}, nil
}
