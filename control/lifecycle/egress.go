package lifecycle

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/sbxedge/sbx/auth/token"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/egresspolicy"
)

// ErrProxyCredential is a proxy credential that is not valid now: not
// the sandbox's, malformed, or of a sandbox that is not live. The causes
// read alike, so the gateway cannot be used to probe for sandbox IDs.
var ErrProxyCredential = errors.New("proxy credential not valid")

var openPolicy = egresspolicy.MustParse(egresspolicy.Spec{Egress: egresspolicy.Open})

// ProxyCredential returns the secret a sandbox presents to the egress
// gateway, with its ID as the user name. Like a grant token it is
// derived from control's derivation secret and the sandbox ID rather
// than drawn and stored: every provisioning, retry and restore hands the
// sandbox the same one, control checks it by deriving it again, and the
// database alone yields none. It lives as long as its sandbox:
// EgressPolicy refuses it once the sandbox is no longer live.
func (m *Manager) ProxyCredential(sandboxID string) (string, error) {
	seed, err := m.hostKeys.Bytes("sbx egress proxy credential v1 "+sandboxID, 32)
	if err != nil {
		return "", fmt.Errorf("derive proxy credential of %s: %w", sandboxID, err)
	}
	secret, _ := token.FromBytes(token.PrefixProxy, [32]byte(seed))
	return secret, nil
}

// noProxy is what a sandbox reaches without the gateway: itself.
const noProxy = "localhost,127.0.0.1,::1"

// proxyEnv is the environment that sends a sandbox's proxy-aware tools
// through the egress gateway with its credential; none without
// Config.EgressProxy. Both spellings, since tools disagree on which
// they read (curl only the lowercase http_proxy).
func (m *Manager) proxyEnv(sandboxID string) ([]string, error) {
	if m.cfg.EgressProxy == "" {
		return nil, nil
	}
	secret, err := m.ProxyCredential(sandboxID)
	if err != nil {
		return nil, err
	}
	u := "http://" + url.UserPassword(sandboxID, secret).String() + "@" + m.cfg.EgressProxy
	var env []string
	for _, name := range []string{"HTTP_PROXY", "HTTPS_PROXY"} {
		env = append(env, name+"="+u, strings.ToLower(name)+"="+u)
	}
	// The gateway itself is reached directly: its credential routes are
	// plain URLs on it, not proxied requests.
	np := noProxy + "," + hostOnly(m.cfg.EgressProxy)
	return append(env, "NO_PROXY="+np, "no_proxy="+np), nil
}

// ProfileNetwork is a profile's egress policy (open unless configured).
func (m *Manager) ProfileNetwork(profile string) *egresspolicy.Policy {
	if p, ok := m.cfg.Network[profile]; ok && p != nil {
		return p
	}
	return openPolicy
}

// EgressPolicy checks a sandbox's proxy credential and returns the
// policy its egress follows: its profile's. It is admitted while the
// sandbox is live or suspended (a restore brings its processes back
// with the same credential) and before its deadline.
func (m *Manager) EgressPolicy(ctx context.Context, sandboxID, secret string) (*egresspolicy.Policy, error) {
	if p, err := token.Parse(secret); err != nil || p != token.PrefixProxy {
		return nil, ErrProxyCredential
	}
	want, err := m.ProxyCredential(sandboxID)
	if err != nil {
		return nil, err
	}
	if subtle.ConstantTimeCompare(token.Hash(want), token.Hash(secret)) != 1 {
		return nil, ErrProxyCredential
	}
	sb, err := m.store.Sandbox(ctx, sandboxID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrProxyCredential
	}
	if err != nil {
		return nil, fmt.Errorf("egress policy of %s: %w", sandboxID, err)
	}
	if AdmissionOf(sb) == Ended || !m.now().Before(sb.DeadlineAt) {
		return nil, ErrProxyCredential
	}
	return m.SandboxNetwork(sb), nil
}

// SandboxNetwork is the policy a sandbox's egress follows: its own when
// it has one, else its profile's.
func (m *Manager) SandboxNetwork(sb store.Sandbox) *egresspolicy.Policy {
	if sb.Network != nil {
		if p, err := egresspolicy.Parse(*sb.Network); err == nil {
			return p
		}
		// Stored only after narrowNetwork accepted it; a row that no
		// longer parses allows nothing rather than the profile's.
		return egresspolicy.MustParse(egresspolicy.Spec{Egress: egresspolicy.None})
	}
	return m.ProfileNetwork(sb.Profile)
}

// narrowNetwork checks a requested policy against the profile's: it
// must parse and allow nothing the profile does not. The error is a 422
// naming the offending entry. nil asks for the profile's own.
func (m *Manager) narrowNetwork(profile string, spec *egresspolicy.Spec) (*egresspolicy.Spec, error) {
	if spec == nil {
		return nil, nil
	}
	p, err := egresspolicy.Parse(*spec)
	if err == nil {
		err = egresspolicy.Narrows(p, m.ProfileNetwork(profile))
	}
	var perr *egresspolicy.Error
	if errors.As(err, &perr) {
		return nil, invalid("network."+perr.Field, "%s", perr.Reason)
	}
	if err != nil {
		return nil, err
	}
	out := p.Spec()
	return &out, nil
}

// maxDeniedEvents bounds the events one batch of decisions adds to a
// sandbox: a loop refused a thousand times is one line of the egress
// log each, not a thousand events.
const maxDeniedEvents = 10

// RecordEgress appends the gateway's decisions to their sandboxes' egress
// logs, and each refusal (up to maxDeniedEvents a batch per sandbox) to
// its events. Decisions of unknown sandboxes are dropped. It returns how
// many were kept.
func (m *Manager) RecordEgress(ctx context.Context, ds []store.EgressDecision) (int, error) {
	kept := 0
	err := m.store.InTx(ctx, func(tx store.Tx) error {
		kept = 0
		sandboxes := map[string]*store.Sandbox{}
		denied := map[string]int{}
		for _, d := range ds {
			sb, seen := sandboxes[d.SandboxID]
			if !seen {
				row, err := tx.Sandbox(ctx, d.SandboxID)
				switch {
				case errors.Is(err, store.ErrNotFound):
				case err != nil:
					return err
				default:
					sb = &row
				}
				sandboxes[d.SandboxID] = sb
			}
			if sb == nil {
				continue
			}
			if err := tx.InsertEgressDecision(ctx, d); err != nil {
				return err
			}
			kept++
			if d.Verdict != "denied" || denied[sb.ID] >= maxDeniedEvents {
				continue
			}
			denied[sb.ID]++
			err := tx.InsertEvent(ctx, store.Event{
				SandboxID: sb.ID, AccountID: sb.AccountID, Type: "egress_denied", State: sb.State,
				Actor: "egress-gateway", Message: fmt.Sprintf("refused %s:%d: %s", d.Host, d.Port, d.Reason), At: d.At,
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("record egress decisions: %w", err)
	}
	return kept, nil
}

// hostOnly is host:port's host.
func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}
