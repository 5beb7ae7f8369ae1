package k8s_test

import (
	"context"
	"crypto/rand"
	"errors"
	"path/filepath"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/sbxedge/sbx/auth/hostkey"
	"github.com/sbxedge/sbx/auth/sshca"
	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/provider/k8s"
	"github.com/sbxedge/sbx/control/provider/k8s/k8stest"
	"github.com/sbxedge/sbx/internal/podssh"
	"github.com/sbxedge/sbx/internal/podtcp"
	"github.com/sbxedge/sbx/internal/podtcp/podtcptest"
)

// env is a provider in a namespace of its own on the real kube-apiserver,
// acting as control's ServiceAccount under deploy/'s Role, with a test
// kubelet running its pods.
type env struct {
	prov *k8s.Provider
	ctl  *k8stest.Cluster
	ns   string
	// client and dyn are cluster-admin, for the test's own checks.
	client  kubernetes.Interface
	dyn     dynamic.Interface
	kubelet *k8stest.Kubelet
	ca      *sshca.CA
	keys    *hostkey.Deriver
	catalog k8s.Catalog
}

func loadCatalog(t testing.TB) k8s.Catalog {
	t.Helper()
	c, err := k8s.LoadCatalog(filepath.Join("testdata", "catalog.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newEnv(t testing.TB, warm k8s.WarmStore) *env {
	t.Helper()
	return newEnvIn(t, k8stest.NewCluster(t), warm)
}

// newEnvIn is newEnv in a given namespace (on an apiserver of the test's
// own, say).
func newEnvIn(t testing.TB, c *k8stest.Cluster, warm k8s.WarmStore) *env {
	t.Helper()
	kl := c.Kubelet
	e := &env{ctl: c, ns: c.Namespace, client: c.Admin, dyn: c.AdminDynamic, kubelet: kl, catalog: loadCatalog(t)}
	for _, pool := range e.catalog.Pools {
		if pool.RuntimeClassName != "" {
			c.RuntimeClass(t, pool.RuntimeClassName)
		}
	}
	var err error
	e.prov, err = k8s.New(k8s.Config{
		Namespace: e.ns, Catalog: e.catalog, SSHPort: kl.SSHPort(), ForwardPort: kl.ForwardPort(), WorkspaceDir: kl.WorkspaceDir(),
		PollInterval: 20 * time.Millisecond, ReadyTimeout: testReadyTimeout, ReplenishInterval: 100 * time.Millisecond,
	}, k8s.Deps{Client: c.Client, Dynamic: c.Dynamic, Warm: warm})
	if err != nil {
		t.Fatal(err)
	}
	if e.ca, _, err = sshca.Generate(); err != nil {
		t.Fatal(err)
	}
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	if e.keys, err = hostkey.New(secret); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.prov.Close() })
	return e
}

// warmProvider is a second provider in e's namespace with a warm pool on
// st; nothing replenishes it but the test (Replenish).
func (e *env) warmProvider(t testing.TB, st k8s.WarmStore) *k8s.Provider {
	t.Helper()
	p, err := k8s.New(k8s.Config{
		Namespace: e.ns, Catalog: e.catalog, SSHPort: e.kubelet.SSHPort(), ForwardPort: e.kubelet.ForwardPort(), WorkspaceDir: e.kubelet.WorkspaceDir(),
		PollInterval: 20 * time.Millisecond, ReadyTimeout: testReadyTimeout,
	}, k8s.Deps{Client: e.ctl.Client, Dynamic: e.ctl.Dynamic, Warm: st})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (e *env) spec(t testing.TB, id, profile string) provider.Spec {
	t.Helper()
	shape, ok := e.catalog.Shape(profile)
	if !ok {
		t.Fatalf("no profile %s", profile)
	}
	priv, _, err := e.keys.Key(id)
	if err != nil {
		t.Fatal(err)
	}
	return provider.Spec{
		SandboxID: id, AccountID: "acct-test", Profile: shape.Name, Platform: shape.Platform,
		CPU: shape.CPU, MemoryMB: shape.MemoryMB, DiskGB: shape.DiskGB, Image: shape.Image,
		HostKeyPEM: priv, UserCAKey: e.ca.AuthorizedKey(),
		Files: []provider.File{{Path: ".config/sbx/grants/p1.token", Mode: 0o600, Data: []byte("grant-token")}},
	}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func parseAuthorized(t testing.TB, line string) gossh.PublicKey {
	t.Helper()
	k, _, _, _, err := gossh.ParseAuthorizedKey([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// testReadyTimeout bounds the provider's wait for a pod's sshd in tests:
// a hang detector, not a speed check. Each test pod runs the real init
// and sshd, and a restore under a loaded machine (load 30-40 beside the
// rest of make test) has taken over 30 s.
const testReadyTimeout = 2 * time.Minute

// forward reaches an EchoApp's port through the forwarder at
// ep.ForwardAddr, as the edge does, pinning the host key of sandbox pin,
// and exchanges a message with it.
func (e *env) forward(ctx context.Context, ep provider.Endpoint, pin string, port int) error {
	_, pub, err := e.keys.Key(pin)
	if err != nil {
		return err
	}
	d := &podtcp.Dialer{CA: e.ca, KeyID: "test-edge"}
	c, err := d.Dial(ctx, podssh.Target{SandboxID: pin, ForwardAddr: ep.ForwardAddr, User: ep.User, HostKey: pub}, port)
	if err != nil {
		return err
	}
	defer c.Close()
	return podtcptest.Echo(c, "hello from the edge")
}

// checkForward: the sandbox's forwarder proves sandbox id's host key and
// reaches its ports; pinning another sandbox's key fails with ErrHostKey.
func (e *env) checkForward(t testing.TB, ep provider.Endpoint, id string) {
	t.Helper()
	ctx, port := ctxT(t), podtcptest.EchoApp(t)
	if err := e.forward(ctx, ep, id, port); err != nil {
		t.Errorf("through the forwarder at %s: %v", ep.ForwardAddr, err)
	}
	if err := e.forward(ctx, ep, id+"-other", port); !errors.Is(err, podtcp.ErrHostKey) {
		t.Errorf("forwarder at %s pinning another sandbox's key: %v; want ErrHostKey", ep.ForwardAddr, err)
	}
}
