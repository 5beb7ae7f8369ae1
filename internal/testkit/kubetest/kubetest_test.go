package kubetest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/sbxedge/sbx/internal/testkit/kubetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(kubetest.WithCluster(m)) }

// TestClusterEnforces checks the harness is a cluster that refuses what a
// real one refuses, so tests that pass on it mean something: PodSecurity
// in a restricted namespace, RBAC for an impersonated ServiceAccount with
// no binding, and strict field validation against a CRD's schema.
func TestClusterEnforces(t *testing.T) {
	c := kubetest.Shared(t)
	ns := c.Namespace(t, kubetest.Restricted)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	pod := func(name string, restricted bool) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example/c:1"}}},
		}
		if restricted {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			}
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{
				AllowPrivilegeEscalation: ptr.To(false),
				Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			}
		}
		return p
	}
	admin := c.Client()
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, pod("ok", true), metav1.CreateOptions{}); err != nil {
		t.Errorf("restricted pod refused: %v", err)
	}
	_, err := admin.CoreV1().Pods(ns).Create(ctx, pod("loose", false), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "PodSecurity") {
		t.Errorf("pod without a securityContext: %v; want forbidden by PodSecurity", err)
	}

	sa := kubernetes.NewForConfigOrDie(c.As(ns, "nobody"))
	if _, err := sa.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("list pods as an unbound ServiceAccount: %v; want forbidden", err)
	}

	snap := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
		"metadata": map[string]any{"name": "s"},
		"spec":     map[string]any{"source": map[string]any{"persistentVolumeClaimName": "p"}, "volumeSnapshotClass": "typo"},
	}}
	gvr := schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshots"}
	_, err = c.Dynamic().Resource(gvr).Namespace(ns).Create(ctx, snap, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict})
	if err == nil || !strings.Contains(err.Error(), `unknown field "spec.volumeSnapshotClass"`) {
		t.Errorf("snapshot with an unknown field: %v; want a strict decoding error", err)
	}
}
