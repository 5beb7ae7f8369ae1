package deploy_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sbxedge/sbx/auth/hostkey"
	"github.com/sbxedge/sbx/auth/sshca"
	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/provider/k8s"
	"github.com/sbxedge/sbx/control/provider/k8s/k8stest"
	"github.com/sbxedge/sbx/control/store/sqlite"
)

func validCatalog(b []byte) error {
	_, err := k8s.ParseCatalog(b)
	return err
}

// recorder is a prometheus.Registerer that keeps what is registered, so
// the test can list metric names that have no samples yet.
type recorder struct{ cs []prometheus.Collector }

func (r *recorder) Register(c prometheus.Collector) error   { r.cs = append(r.cs, c); return nil }
func (r *recorder) MustRegister(cs ...prometheus.Collector) { r.cs = append(r.cs, cs...) }
func (r *recorder) Unregister(prometheus.Collector) bool    { return false }

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// exportedMetrics names every series the k8s provider and the lifecycle
// register.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	rec := &recorder{}
	k8s.NewMetrics(rec)
	lifecycle.NewMetrics(rec)
	names := map[string]bool{}
	ch := make(chan *prometheus.Desc, 64)
	for _, c := range rec.cs {
		c.Describe(ch)
	}
	close(ch)
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			names[m[1]] = true
		}
	}
	if len(names) == 0 {
		t.Fatal("no metric names found; the check would be vacuous")
	}
	return names
}

// grant is one (API group, resource, verb) triple.
type grant struct{ group, resource, verb string }

func (g grant) String() string { return fmt.Sprintf("%s/%s:%s", g.group, g.resource, g.verb) }

// TestRBACMatchesProviderCalls drives the k8s provider through every path
// (informer, cold boot, warm pool fill and claim, suspend, restore,
// status, list, destroy), records each API call, and
// compares them with the control Role: every call must be allowed in the
// sandbox namespace, and every rule must be used. It runs on the real
// apiserver, as control's ServiceAccount under that Role: a call the Role
// does not allow is refused there and fails the test.
func TestRBACMatchesProviderCalls(t *testing.T) {
	t.Parallel()
	r := render(t, "base")
	var role *rbacv1.Role
	for _, o := range r.objects {
		if v, ok := o.(*rbacv1.Role); ok && v.Name == "control-sandboxes" {
			role = v
		}
	}
	if role == nil {
		t.Fatal("no control-sandboxes Role")
	}
	granted := map[grant]bool{}
	for _, rule := range role.Rules {
		for _, g := range rule.APIGroups {
			for _, res := range rule.Resources {
				for _, v := range rule.Verbs {
					granted[grant{g, res, v}] = true
				}
			}
		}
	}

	kc := k8stest.NewCluster(t)
	calls := driveProvider(t, kc)
	used := map[grant]bool{}
	for _, a := range calls {
		g := grant{a.Group, a.Resource, a.Verb}
		if a.Subresource != "" {
			g.resource += "/" + a.Subresource
		}
		if a.Namespace != kc.Namespace {
			t.Errorf("call %s in namespace %q; the Role covers the sandbox namespace only", g, a.Namespace)
		}
		used[g] = true
		// The apiserver enforced the Role already (driveProvider fails on
		// a refused call); this names the rule.
		if !granted[g] || a.Status == http.StatusForbidden {
			t.Errorf("provider calls %s (status %d), which the Role does not grant", g, a.Status)
		}
	}
	for g := range granted {
		if !used[g] {
			t.Errorf("Role grants %s, which the provider never calls", g)
		}
	}
	var list []string
	for g := range used {
		list = append(list, g.String())
	}
	sort.Strings(list)
	t.Logf("provider calls: %v", list)
}

// driveProvider runs every provider path once, as control's
// ServiceAccount under the Role on the real apiserver, and returns the
// calls it made through its own clients (the test kubelet and the test's
// own set-up use cluster-admin ones).
func driveProvider(t *testing.T, kc *k8stest.Cluster) []k8stest.Call {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ns, kl := kc.Namespace, kc.Kubelet
	cat, err := k8s.LoadCatalog(filepath.Join("base", "catalog.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, pool := range cat.Pools {
		if pool.RuntimeClassName != "" {
			kc.RuntimeClass(t, pool.RuntimeClassName) // the macOS node pool's runtime
		}
	}
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "sbx.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	p, err := k8s.New(k8s.Config{
		Namespace: ns, Catalog: cat, SSHPort: kl.SSHPort(), ForwardPort: kl.ForwardPort(), WorkspaceDir: kl.WorkspaceDir(),
		PollInterval: 20 * time.Millisecond, ReplenishInterval: 50 * time.Millisecond,
	}, k8s.Deps{Client: kc.Client, Dynamic: kc.Dynamic, Warm: st})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ca, _, err := sshca.Generate()
	if err != nil {
		t.Fatal(err)
	}
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	keys, _ := hostkey.New(secret)
	spec := func(id, profile string) provider.Spec {
		s, _ := cat.Shape(profile)
		priv, _, err := keys.Key(id)
		if err != nil {
			t.Fatal(err)
		}
		return provider.Spec{SandboxID: id, AccountID: "acct-rbac", Profile: s.Name, Platform: s.Platform,
			CPU: s.CPU, MemoryMB: s.MemoryMB, DiskGB: s.DiskGB, Image: s.Image, HostKeyPEM: priv, UserCAKey: ca.AuthorizedKey()}
	}
	// Wait for the warm pool (tuist-linux-medium keeps 2) to fill.
	deadline := time.Now().Add(30 * time.Second)
	for {
		rows, err := st.WarmPods(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("warm pool has %d rows; want 2", len(rows))
		}
		time.Sleep(20 * time.Millisecond)
	}
	warm := spec("sbx-rbac-warm", "tuist-linux-medium")
	if ep, err := p.Provision(ctx, warm); err != nil || ep.Boot != k8s.BootWarm {
		t.Fatalf("warm provision: %+v, %v; want a warm hit", ep, err)
	}
	cold := spec("sbx-rbac-cold", "tuist-linux-large")
	if _, err := p.Provision(ctx, cold); err != nil {
		t.Fatal(err)
	}
	// A second Provision of a running sandbox updates nothing but reads.
	if _, err := p.Provision(ctx, cold); err != nil {
		t.Fatal(err)
	}
	if err := p.Suspend(ctx, cold.SandboxID); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Restore(ctx, cold); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Status(ctx, cold.SandboxID); err != nil {
		t.Fatal(err)
	}
	if _, err := p.List(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{warm.SandboxID, cold.SandboxID} {
		if err := p.Destroy(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	// Re-provisioning over a Secret left by a crash updates it. The
	// test's own create goes through the admin client, not the recorder.
	left := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sbx-rbac-again-ssh", Namespace: ns}}
	if _, err := kc.Admin.CoreV1().Secrets(ns).Create(ctx, left, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Provision(ctx, spec("sbx-rbac-again", "tuist-linux-large")); err != nil {
		t.Fatal(err)
	}
	// A warm pod that ended is retired by the replenisher.
	rows, _ := st.WarmPods(ctx)
	var free string
	for _, w := range rows {
		if w.ClaimedBy == "" {
			free = w.Pod
		}
	}
	if err := kl.Fail(ctx, free, k8stest.Termination{ContainerReason: "Error", ExitCode: 1, FinishedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := p.Replenish(ctx); err != nil {
		t.Fatal(err)
	}
	return kc.Calls()
}
