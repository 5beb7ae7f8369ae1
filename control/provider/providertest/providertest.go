// Package providertest is the conformance suite every provider.Provider
// passes: provision, status, list, host key pinning, exec over the one
// SSH road, suspend and restore (for Suspenders), destroy, and the
// idempotency of each. Each provider's tests call Run with its own
// environment (the local provider in both server modes, the k8s provider
// on its fakes and test kubelet).
package providertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/auth/hostkey"
	"github.com/sbxedge/sbx/auth/sshca"
	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/internal/podssh"
)

// Env is one provider under test.
type Env struct {
	Provider provider.Provider
	// Spec completes spec for the provider (profile, shape, image); the
	// suite fills in the sandbox ID, host key and CA.
	Spec func(spec provider.Spec) provider.Spec
}

// Run runs the suite against the provider newEnv builds; newEnv is called
// once per subtest and cleans up with t.Cleanup.
func Run(t *testing.T, newEnv func(t *testing.T) Env) {
	t.Run("Lifecycle", func(t *testing.T) { testLifecycle(t, newEnv(t)) })
	t.Run("DestroyUnknown", func(t *testing.T) { testDestroyUnknown(t, newEnv(t)) })
}

type kit struct {
	ca   *sshca.CA
	keys *hostkey.Deriver
	pool *podssh.Pool
}

func newKit(t *testing.T) *kit {
	t.Helper()
	ca, _, err := sshca.Generate()
	if err != nil {
		t.Fatal(err)
	}
	keys, err := hostkey.New([]byte("providertest-secret-0123456789ab"))
	if err != nil {
		t.Fatal(err)
	}
	pool := podssh.NewPool(ca, nil)
	t.Cleanup(func() { pool.Close() })
	return &kit{ca: ca, keys: keys, pool: pool}
}

func (k *kit) spec(t *testing.T, e Env, id string) (provider.Spec, ssh.PublicKey, string) {
	t.Helper()
	priv, pub, err := k.keys.Key(id)
	if err != nil {
		t.Fatal(err)
	}
	key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(pub))
	if err != nil {
		t.Fatal(err)
	}
	s := provider.Spec{SandboxID: id, AccountID: "acct-conformance", HostKeyPEM: priv, UserCAKey: k.ca.AuthorizedKey()}
	if e.Spec != nil {
		s = e.Spec(s)
	}
	return s, key, pub
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func (k *kit) exec(ctx context.Context, t *testing.T, id, pub string, ep provider.Endpoint, cmd string) string {
	t.Helper()
	res, err := k.pool.Exec(ctx, podssh.Target{SandboxID: id, Addr: ep.Addr, User: ep.User, HostKey: pub, Workspace: ep.Workspace},
		podssh.ExecRequest{Command: cmd})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec %q in %s: exit %d stderr %q, %v", cmd, id, res.ExitCode, res.Stderr, err)
	}
	return string(res.Stdout)
}

func wantPhase(ctx context.Context, t *testing.T, p provider.Provider, id string, want provider.Phase) {
	t.Helper()
	in, err := p.Status(ctx, id)
	if want == provider.PhaseNotFound {
		if !errors.Is(err, provider.ErrNotFound) && (err != nil || in.Phase != provider.PhaseNotFound) {
			t.Fatalf("Status(%s) = %+v, %v; want not found", id, in, err)
		}
		return
	}
	if err != nil || in.Phase != want {
		t.Fatalf("Status(%s) = %+v, %v; want %s", id, in, err, want)
	}
}

func testLifecycle(t *testing.T, e Env) {
	ctx := ctxT(t)
	k := newKit(t)
	const id = "sbx-conformance"
	spec, pinned, pub := k.spec(t, e, id)
	p := e.Provider

	ep, err := p.Provision(ctx, spec)
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	if ep.Addr == "" || ep.User == "" {
		t.Fatalf("Provision endpoint %+v: want an address and a user", ep)
	}
	again, err := p.Provision(ctx, spec)
	if err != nil || again.Addr != ep.Addr {
		t.Fatalf("second Provision = %+v, %v; want the same endpoint %s (idempotent)", again, err, ep.Addr)
	}
	wantPhase(ctx, t, p, id, provider.PhaseRunning)
	list, err := p.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	found := false
	for _, in := range list {
		found = found || in.SandboxID == id
	}
	if !found {
		t.Fatalf("List = %+v; want it to include %s", list, id)
	}

	// Host key pinning: the sandbox presents its own derived key, and a
	// client pinned to another sandbox's key is refused.
	if err := podssh.ProbeHostKey(ctx, ep.Addr, pinned); err != nil {
		t.Fatalf("probe with the pinned host key: %v", err)
	}
	_, otherPub, _ := k.keys.Key("sbx-someone-else")
	other, _, _, _, _ := ssh.ParseAuthorizedKey([]byte(otherPub))
	if err := podssh.ProbeHostKey(ctx, ep.Addr, other); err == nil {
		t.Fatal("probe pinned to another sandbox's host key succeeded; want a mismatch")
	}
	k.exec(ctx, t, id, pub, ep, "echo kept > conformance.txt")
	k.pool.Forget(id)

	if sus, ok := p.(provider.Suspender); ok {
		if err := sus.Suspend(ctx, id); err != nil {
			t.Fatalf("Suspend: %v", err)
		}
		if err := sus.Suspend(ctx, id); err != nil {
			t.Fatalf("second Suspend: %v (want idempotent)", err)
		}
		wantPhase(ctx, t, p, id, provider.PhaseStopped)
		back, err := sus.Restore(ctx, spec)
		if err != nil {
			t.Fatalf("Restore: %v", err)
		}
		if again, err := sus.Restore(ctx, spec); err != nil || again.Addr != back.Addr {
			t.Fatalf("second Restore = %+v, %v; want the same endpoint %s (idempotent)", again, err, back.Addr)
		}
		wantPhase(ctx, t, p, id, provider.PhaseRunning)
		if err := podssh.ProbeHostKey(ctx, back.Addr, pinned); err != nil {
			t.Fatalf("probe after restore with the pinned host key: %v", err)
		}
		if got := k.exec(ctx, t, id, pub, back, "cat conformance.txt"); got != "kept\n" {
			t.Fatalf("workspace after restore: %q, want %q", got, "kept\n")
		}
		k.pool.Forget(id)
	}

	if err := p.Destroy(ctx, id); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if err := p.Destroy(ctx, id); err != nil {
		t.Fatalf("second Destroy: %v (want idempotent)", err)
	}
	wantPhase(ctx, t, p, id, provider.PhaseNotFound)
	if sus, ok := p.(provider.Suspender); ok {
		if _, err := sus.Restore(ctx, spec); !errors.Is(err, provider.ErrSnapshotGone) {
			t.Fatalf("Restore after Destroy = %v; want ErrSnapshotGone", err)
		}
		_ = p.Destroy(ctx, id)
	}
}

func testDestroyUnknown(t *testing.T, e Env) {
	ctx := ctxT(t)
	if err := e.Provider.Destroy(ctx, "sbx-never-provisioned"); err != nil {
		t.Fatalf("Destroy of an unknown sandbox: %v; want nil", err)
	}
	wantPhase(ctx, t, e.Provider, "sbx-never-provisioned", provider.PhaseNotFound)
}
