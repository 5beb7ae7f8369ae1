package deploy_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sbxedge/sbx/internal/testkit/kubetest"
)

// TestServerSideDryRun applies every overlay with kubectl's server-side
// apply in dry-run mode against the real apiserver: its field validation
// (strict), defaulting, admission and the CRDs' schemas (PrometheusRule)
// see each object as a cluster would. The namespaces exist first, as they
// would after the first apply; nothing else is created.
func TestServerSideDryRun(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatal("kubectl is required (the machine image ships it; .ci/run installs it)")
	}
	api := kubetest.Shared(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := api.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, ns := range []string{"sbx-system", "sbx-sandboxes"} {
		_, err := api.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	for _, overlay := range []string{"dev", "production"} {
		t.Run(overlay, func(t *testing.T) {
			cmd := exec.CommandContext(ctx, kubectl, "--kubeconfig", kubeconfig, "apply", "--server-side",
				"--dry-run=server", "--field-manager=sbx-deploy-test", "--validate=strict", "-k", filepath.Join("overlays", overlay))
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("kubectl apply --server-side --dry-run=server -k overlays/%s: %v\n%s", overlay, err, out)
			}
			// Every object is reported, "serverside-applied (server dry run)".
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			for _, l := range lines {
				if !strings.Contains(l, "(server dry run)") {
					t.Errorf("unexpected kubectl output line: %q", l)
				}
			}
			if len(lines) < 10 {
				t.Errorf("only %d objects applied:\n%s", len(lines), out)
			}
			t.Logf("overlays/%s: %d objects pass the apiserver's validation", overlay, len(lines))
		})
	}
}
