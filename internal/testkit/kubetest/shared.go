package kubetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestingM is what Main wraps: *testing.M, or a wrapper of it such as the
// one goleak.VerifyTestMain takes.
type TestingM interface{ Run() int }

var (
	sharedOnce sync.Once
	shared     *Cluster
	sharedErr  error
	sharedDir  string
)

// WithCluster wraps m so that the cluster Shared starts (at most one per
// test binary, only if a test asks) is stopped when the tests end, before
// a leak check around it runs:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(kubetest.WithCluster(m)) }
func WithCluster(m TestingM) TestingM { return runner{m} }

type runner struct{ m TestingM }

func (r runner) Run() int {
	code := r.m.Run()
	if shared != nil {
		shared.Stop()
	}
	if sharedDir != "" {
		_ = os.RemoveAll(sharedDir)
	}
	if scratchDir != "" {
		_ = os.RemoveAll(scratchDir)
	}
	return code
}

var (
	scratchOnce sync.Once
	scratchDir  string
	scratchErr  error
)

// ScratchDir is a directory for what the test binary's tests share (a
// binary built once, say), made on first use and removed when the tests
// end. Only call it from a package whose TestMain uses WithCluster.
func ScratchDir() (string, error) {
	scratchOnce.Do(func() { scratchDir, scratchErr = os.MkdirTemp("", "sbx-kubetest-scratch-") })
	return scratchDir, scratchErr
}

// Shared returns the test binary's cluster, starting it on first use. With
// no binaries it skips the test (naming make k8s-bins), or fails it when
// SBX_K8S_REQUIRED=1. Only call it from a package whose TestMain uses
// WithCluster, or the processes outlive the tests.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	sharedOnce.Do(func() {
		sharedDir, sharedErr = os.MkdirTemp("", "sbx-kubetest-")
		if sharedErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		shared, sharedErr = Start(ctx, sharedDir)
		if sharedErr == nil {
			fmt.Fprintf(os.Stderr, "kubetest: etcd and kube-apiserver at %s started in %s\n", shared.host, shared.StartTime.Round(time.Millisecond))
		}
	})
	if sharedErr != nil {
		if errors.Is(sharedErr, ErrNoBinaries) && !Required() {
			t.Skip(sharedErr)
		}
		t.Fatal(sharedErr)
	}
	return shared
}

// Restricted labels a namespace with the restricted Pod Security Standard,
// enforced, as deploy/ labels the sandbox namespace.
var Restricted = map[string]string{
	"pod-security.kubernetes.io/enforce": "restricted",
	"pod-security.kubernetes.io/warn":    "restricted",
	"pod-security.kubernetes.io/audit":   "restricted",
}

var notDNS = regexp.MustCompile(`[^a-z0-9-]+`)

// Namespace creates a namespace of the test's own, named after it, with
// labels and its default ServiceAccount (there is no controller-manager to
// make it, and ServiceAccount admission refuses pods without one).
func (c *Cluster) Namespace(t testing.TB, labels map[string]string) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	base := strings.Trim(notDNS.ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	if len(base) > 40 {
		base = strings.TrimRight(base[:40], "-")
	}
	name := base + "-" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs := c.Client()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("kubetest: create namespace: %v", err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if _, err := cs.CoreV1().ServiceAccounts(name).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatalf("kubetest: create default ServiceAccount: %v", err)
	}
	return name
}
