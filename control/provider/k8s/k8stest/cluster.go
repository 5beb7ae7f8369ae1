package k8stest

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sbxedge/sbx/deploy"
	"github.com/sbxedge/sbx/internal/testkit/kubetest"
)

// Cluster is a test's own sandbox namespace on the test binary's real
// kube-apiserver: labelled with the restricted Pod Security Standard as
// deploy/ labels it, with deploy/'s control Role and RoleBinding applied,
// and a test kubelet running its pods.
type Cluster struct {
	API       *kubetest.Cluster
	Namespace string
	// Client and Dynamic act as control's ServiceAccount: RBAC allows
	// them exactly what deploy/ grants. Give these to the code under test.
	Client  kubernetes.Interface
	Dynamic dynamic.Interface
	// Admin and AdminDynamic are cluster-admin, for a test's own set-up
	// and checks.
	Admin        kubernetes.Interface
	AdminDynamic dynamic.Interface
	Kubelet      *Kubelet

	rec     *Recorder
	control *rest.Config
}

// NewCluster makes the namespace, applies the Role and starts the kubelet.
// Without kube-apiserver binaries it skips the test or fails it (see
// kubetest.Shared).
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	return NewClusterOn(t, kubetest.Shared(t))
}

// NewClusterOn is NewCluster on a given apiserver (a test that restarts
// it runs its own).
func NewClusterOn(t testing.TB, api *kubetest.Cluster) *Cluster {
	t.Helper()
	ns := api.Namespace(t, kubetest.Restricted)
	role, binding, err := deploy.ControlRBAC()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := api.Client()
	role.Namespace, binding.Namespace = ns, ns
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
		t.Fatalf("apply control Role: %v", err)
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
		t.Fatalf("apply control RoleBinding: %v", err)
	}
	var sa *struct{ ns, name string }
	for _, s := range binding.Subjects {
		if s.Kind == "ServiceAccount" {
			sa = &struct{ ns, name string }{s.Namespace, s.Name}
		}
	}
	if sa == nil {
		t.Fatal("control RoleBinding binds no ServiceAccount")
	}
	rec := &Recorder{}
	asControl := api.As(sa.ns, sa.name)
	asControl.Wrap(rec.wrap)
	c := &Cluster{
		API: api, Namespace: ns,
		Client:       kubernetes.NewForConfigOrDie(asControl),
		Dynamic:      dynamic.NewForConfigOrDie(asControl),
		Admin:        admin,
		AdminDynamic: api.Dynamic(),
		rec:          rec,
		control:      asControl,
	}
	c.Kubelet = Start(t, c.Admin, c.AdminDynamic, ns)
	return c
}

// RuntimeClass makes the cluster-scoped RuntimeClass name (its handler
// of the same name) unless it exists: the RuntimeClass admission plugin
// refuses pods that name a missing one, as a cluster without the macOS
// runtime would.
func (c *Cluster) RuntimeClass(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Handler: name}
	if _, err := c.Admin.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create RuntimeClass %s: %v", name, err)
	}
}

// OnRequest runs f before each request made through Client and Dynamic
// is sent (a test's fault injection: a concurrent write, say).
func (c *Cluster) OnRequest(f func(*http.Request)) { c.rec.setHook(f) }

// Calls returns every API call made through Client and Dynamic so far.
func (c *Cluster) Calls() []Call { return c.rec.Calls() }

// ControlConfig is the rest.Config the Client uses: control's
// ServiceAccount, impersonated, its calls recorded.
func (c *Cluster) ControlConfig() *rest.Config { return rest.CopyConfig(c.control) }

// Call is one API request, in RBAC's terms.
type Call struct {
	Group, Resource, Subresource, Namespace, Verb string
	Status                                        int
}

// Recorder is an http.RoundTripper wrapper that keeps each request as an
// RBAC (group, resource, verb) triple, the way the apiserver's request
// info resolver reads the path.
type Recorder struct {
	mu    sync.Mutex
	calls []Call
	hook  func(*http.Request)
}

func (r *Recorder) setHook(f func(*http.Request)) {
	r.mu.Lock()
	r.hook = f
	r.mu.Unlock()
}

func (r *Recorder) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		r.mu.Lock()
		hook := r.hook
		r.mu.Unlock()
		if hook != nil {
			hook(req)
		}
		resp, err := rt.RoundTrip(req)
		if c, ok := parseCall(req); ok {
			if resp != nil {
				c.Status = resp.StatusCode
			}
			r.mu.Lock()
			r.calls = append(r.calls, c)
			r.mu.Unlock()
		}
		return resp, err
	})
}

// Calls returns the calls recorded so far.
func (r *Recorder) Calls() []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Call(nil), r.calls...)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// parseCall reads /api/v1/... and /apis/<group>/<version>/... paths.
func parseCall(req *http.Request) (Call, bool) {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	var c Call
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		c.Group = parts[1]
		parts = parts[3:]
	default:
		return c, false
	}
	if len(parts) > 2 && parts[0] == "namespaces" {
		c.Namespace = parts[1]
		parts = parts[2:]
	}
	c.Resource = parts[0]
	named := len(parts) >= 2
	if len(parts) >= 3 {
		c.Subresource = parts[2]
	}
	switch req.Method {
	case http.MethodGet:
		switch {
		case req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1":
			c.Verb = "watch"
		case named:
			c.Verb = "get"
		default:
			c.Verb = "list"
		}
	case http.MethodPost:
		c.Verb = "create"
	case http.MethodPut:
		c.Verb = "update"
	case http.MethodPatch:
		c.Verb = "patch"
	case http.MethodDelete:
		c.Verb = "delete"
		if !named {
			c.Verb = "deletecollection"
		}
	default:
		return c, false
	}
	return c, true
}
