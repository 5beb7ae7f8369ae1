package k8s_test

import (
	"context"
	"crypto/rand"
	"path/filepath"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/sbxedge/sbx/auth/hostkey"
	"github.com/sbxedge/sbx/auth/sshca"
	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/provider/k8s"
	"github.com/sbxedge/sbx/control/provider/k8s/k8stest"
)

const ns = "sandboxes"

// env is a provider on fake clients with a test kubelet running its pods.
type env struct {
	prov    *k8s.Provider
	client  *fake.Clientset
	dyn     *dynamicfake.FakeDynamicClient
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

func newEnv(t *testing.T, warm k8s.WarmStore) *env {
	t.Helper()
	client, dyn := k8stest.Clients()
	kl := k8stest.Start(t, client, dyn, ns)
	e := &env{client: client, dyn: dyn, kubelet: kl, catalog: loadCatalog(t)}
	var err error
	e.prov, err = k8s.New(k8s.Config{
		Namespace: ns, Catalog: e.catalog, SSHPort: kl.SSHPort(), WorkspaceDir: kl.WorkspaceDir(),
		PollInterval: 20 * time.Millisecond, ReadyTimeout: 30 * time.Second, ReplenishInterval: 100 * time.Millisecond,
	}, k8s.Deps{Client: client, Dynamic: dyn, Warm: warm})
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

func ctxT(t *testing.T) context.Context {
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
