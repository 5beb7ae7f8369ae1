package lifecycle

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/auth/sshca"
	"github.com/sbxedge/sbx/control/store"
)

// ErrPortNotFound: the port is not exposed on the sandbox.
var ErrPortNotFound = errors.New("port not exposed")

// MaxSSHCredentialMinutes is both the default and the ceiling of an SSH
// credential's lifetime: one that leaks (a laptop backup, a pasted
// terminal) is useful for an hour at most, and minting another is one
// call.
const MaxSSHCredentialMinutes = 60

// Reachable is nil when a sandbox in sb's state can still be worked in
// (any admission but Ended: a connection to one that is not ready waits
// for it or wakes it), else the StateError naming action: for what the
// API hands out to reach it later (an SSH credential, an exposed port, a
// terminal stream's ticket), which must not outlive the sandbox
// unnoticed.
func Reachable(sb store.Sandbox, action string) error {
	if AdmissionOf(sb) == Ended {
		return &StateError{State: string(sb.State), Action: action}
	}
	return nil
}

// SSHCredential is a freshly minted credential. PrivateKeyPEM exists only
// here: the store keeps the public key's fingerprint.
type SSHCredential struct {
	store.SSHCredential
	PrivateKeyPEM []byte
}

// MintSSHCredential mints an ed25519 key pair bound to one sandbox of
// acct, valid for minutes (1 to MaxSSHCredentialMinutes), in any state
// but Ended: a connection to a sandbox that is not ready waits for it, or
// wakes it. caller is the agent token asking: the credential is refused
// once that token is revoked.
func (m *Manager) MintSSHCredential(ctx context.Context, acct store.Account, caller, id string, minutes int) (SSHCredential, error) {
	if minutes < 1 || minutes > MaxSSHCredentialMinutes {
		return SSHCredential{}, invalid("ttl_minutes", "must be from 1 to %d", MaxSSHCredentialMinutes)
	}
	if _, err := m.Get(ctx, acct, id); err != nil {
		return SSHCredential{}, err
	}
	pemKey, signer, err := sshca.GenerateKey()
	if err != nil {
		return SSHCredential{}, fmt.Errorf("mint ssh key for %s: %w", id, err)
	}
	now := m.now().UTC()
	cred := store.SSHCredential{
		ID: newPrefixedID("sshc-"), SandboxID: id, AccountID: acct.ID,
		Fingerprint: ssh.FingerprintSHA256(signer.PublicKey()), TokenID: caller,
		CreatedAt: now, ExpiresAt: now.Add(time.Duration(minutes) * time.Minute).Truncate(time.Microsecond),
	}
	// The state is checked under the row lock, so a credential is never
	// minted for a sandbox that a concurrent DELETE just ended.
	err = m.underLock(ctx, id, "open SSH to", func(tx store.Tx, sb store.Sandbox) (store.Event, error) {
		if err := tx.InsertSSHCredential(ctx, cred); err != nil {
			return store.Event{}, err
		}
		return store.Event{Type: "ssh_credential", Actor: "account:" + acct.ID, At: now,
			Message: "SSH credential " + cred.ID + " " + cred.Fingerprint + " until " + cred.ExpiresAt.Format(time.RFC3339)}, nil
	})
	if err != nil {
		return SSHCredential{}, err
	}
	return SSHCredential{SSHCredential: cred, PrivateKeyPEM: pemKey}, nil
}

// PortSpec is what ExposePort is asked for. Empty Access and HostPolicy
// keep those of the port when it is exposed already, and take the
// defaults (private, forward) for a new one: asking for a port's URL
// again must not turn a public port private.
type PortSpec struct {
	Port       int
	Access     store.PortAccess
	HostPolicy store.HostPolicy
	// Name is the port's label ("web"); empty keeps the one it has.
	Name string
}

// portName is the shape of a port's name: a DNS label, short enough to
// read on a page.
var portName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$`)

// ExposePort exposes a port of acct's sandbox as a preview host, or
// changes the access of one already exposed (created is false then, and
// the label stays). Callers tell the edge the label changed.
func (m *Manager) ExposePort(ctx context.Context, acct store.Account, id string, spec PortSpec) (p store.PreviewPort, created bool, err error) {
	if _, err := m.Get(ctx, acct, id); err != nil {
		return store.PreviewPort{}, false, err
	}
	err = m.underLock(ctx, id, "expose a port of", func(tx store.Tx, sb store.Sandbox) (store.Event, error) {
		ps, err := tx.PreviewPorts(ctx, id)
		if err != nil {
			return store.Event{}, err
		}
		for _, p := range ps {
			switch {
			case p.Port == spec.Port:
				spec.Access = cmp.Or(spec.Access, p.Access)
				spec.HostPolicy = cmp.Or(spec.HostPolicy, p.HostPolicy)
				spec.Name = cmp.Or(spec.Name, p.Name)
			case spec.Name != "" && p.Name == spec.Name:
				return store.Event{}, invalid("label", "%q already names port %d of this sandbox", spec.Name, p.Port)
			}
		}
		if err := validatePort(&spec, sb, m.reserved.what); err != nil {
			return store.Event{}, err
		}
		now := m.now().UTC()
		label := newLabel()
		p, err = tx.PutPreviewPort(ctx, store.PreviewPort{
			SandboxID: id, AccountID: acct.ID, Port: spec.Port, Label: label, Name: spec.Name,
			Access: spec.Access, HostPolicy: spec.HostPolicy, CreatedAt: now.Truncate(time.Microsecond),
		})
		if err != nil {
			return store.Event{}, err
		}
		created = p.Label == label
		return store.Event{Type: "preview_port", Actor: "account:" + acct.ID, At: now,
			Message: fmt.Sprintf("port %d exposed (%s, host %s)", p.Port, p.Access, p.HostPolicy)}, nil
	})
	return p, created, err
}

// UnexposePort removes an exposed port and returns its label, for the
// edge to drop; ErrPortNotFound if it was not exposed. Any state may
// unexpose.
func (m *Manager) UnexposePort(ctx context.Context, acct store.Account, id string, port int) (label string, err error) {
	if _, err := m.Get(ctx, acct, id); err != nil {
		return "", err
	}
	err = m.underLock(ctx, id, "", func(tx store.Tx, sb store.Sandbox) (store.Event, error) {
		ps, err := tx.PreviewPorts(ctx, id)
		if err != nil {
			return store.Event{}, err
		}
		for _, p := range ps {
			if p.Port == port {
				label = p.Label
			}
		}
		if err := tx.DeletePreviewPort(ctx, id, port); errors.Is(err, store.ErrNotFound) {
			return store.Event{}, ErrPortNotFound
		} else if err != nil {
			return store.Event{}, err
		}
		return store.Event{Type: "preview_port", Actor: "account:" + acct.ID, At: m.now().UTC(),
			Message: fmt.Sprintf("port %d unexposed", port)}, nil
	})
	return label, err
}

// underLock runs change with the sandbox's row locked and records the
// event it returns, in one transaction. A non-empty action requires a
// reachable sandbox (see Reachable) and names what was refused otherwise.
func (m *Manager) underLock(ctx context.Context, id, action string, change func(store.Tx, store.Sandbox) (store.Event, error)) error {
	return m.store.InTx(ctx, func(tx store.Tx) error {
		sb, err := tx.SandboxForUpdate(ctx, id)
		if err != nil {
			return fmt.Errorf("lock sandbox %s: %w", id, err)
		}
		if action != "" {
			if err := Reachable(sb, action); err != nil {
				return err
			}
		}
		ev, err := change(tx, sb)
		if err != nil {
			return err
		}
		ev.SandboxID, ev.AccountID, ev.State = sb.ID, sb.AccountID, sb.State
		return tx.InsertEvent(ctx, ev)
	})
}

// ReservePort refuses, from now on, to expose port on any sandbox: this
// host serves it itself on the network its sandboxes share (sbx dev's
// local sandboxes share its loopback), so a preview of it would publish
// the host's server, not the sandbox's. what names that server in the
// refusal ("sbx dev's own metrics listener"). Safe for concurrent use;
// ports already exposed stay exposed, so reserve before serving the API.
func (m *Manager) ReservePort(port int, what string) {
	m.reserved.mu.Lock()
	defer m.reserved.mu.Unlock()
	if m.reserved.ports == nil {
		m.reserved.ports = map[int]string{}
	}
	m.reserved.ports[port] = what
}

// ReservedPort names the host's own server on port, if ReservePort
// reserved it (webhook deliveries refuse it on loopback too).
func (m *Manager) ReservedPort(port int) (string, bool) { return m.reserved.what(port) }

// reservedPorts are the ports of ReservePort; mu guards ports.
type reservedPorts struct {
	mu    sync.RWMutex
	ports map[int]string
}

// what names the host's server on port, if it is reserved.
func (r *reservedPorts) what(port int) (string, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	w, ok := r.ports[port]
	return w, ok
}

// validatePort checks and completes spec. The sandbox's own sshd and
// port forwarder are never a preview: exposing either would hand its
// handshake to whoever may see the preview. Their ports are known once
// provisioned (a pending sandbox has no endpoint yet). Nor is a port the
// host reserved (reserved reports what serves it).
func validatePort(spec *PortSpec, sb store.Sandbox, reserved func(int) (string, bool)) error {
	if spec.Port < 1 || spec.Port > 65535 {
		return invalid("port", "must be from 1 to 65535")
	}
	if spec.Port == 22 || spec.Port == endpointPort(sb.Endpoint) {
		return invalid("port", "%d is the sandbox's SSH server, which cannot be exposed", spec.Port)
	}
	if spec.Port == endpointPort(sb.ForwardEndpoint) {
		return invalid("port", "%d is the sandbox's port forwarder, which cannot be exposed", spec.Port)
	}
	if what, ok := reserved(spec.Port); ok {
		return invalid("port", "%d is %s; a sandbox's server cannot be listening there", spec.Port, what)
	}
	if spec.Name != "" && !portName.MatchString(spec.Name) {
		return invalid("label", "must be a DNS label: 1 to 32 lowercase letters, digits and inner hyphens")
	}
	// "account" (an identity provider's group) is not modelled: the
	// owning account's members are what private admits.
	if err := defaultOneOf("access", &spec.Access, store.AccessPrivate, store.AccessPublic); err != nil {
		return err
	}
	return defaultOneOf("host_policy", &spec.HostPolicy, store.HostForward, store.HostLocalhost)
}

// defaultOneOf sets an empty *v to def and refuses a value that is
// neither def nor other, naming field.
func defaultOneOf[T ~string](field string, v *T, def, other T) error {
	switch *v {
	case "":
		*v = def
	case def, other:
	default:
		return invalid(field, "must be %q or %q", def, other)
	}
	return nil
}

// endpointPort is the port of a host:port endpoint, -1 when it has none
// (an empty ForwardEndpoint).
func endpointPort(hostPort string) int {
	_, p, err := net.SplitHostPort(hostPort)
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		return -1
	}
	return n
}

// newLabel returns 20 random lowercase base32 characters (100 bits), a
// valid DNS label: unguessable, and unrelated to the sandbox ID, so an ID
// seen in a log or a URL does not lead to its previews.
func newLabel() string {
	var b [13]byte
	_, _ = rand.Read(b[:])
	return idEncoding.EncodeToString(b[:])[:20]
}
