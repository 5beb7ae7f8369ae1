package k8s_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/sbxedge/sbx/control/provider/k8s"
)

// networkPolicy is the named NetworkPolicy of deploy/base.
func networkPolicy(t *testing.T, name string) *networkingv1.NetworkPolicy {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "deploy", "base", "networkpolicies.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for doc := range strings.SplitSeq(string(b), "\n---\n") {
		var np networkingv1.NetworkPolicy
		if err := yaml.Unmarshal([]byte(doc), &np); err != nil {
			t.Fatal(err)
		}
		if np.Kind == "NetworkPolicy" && np.Name == name {
			return &np
		}
	}
	t.Fatalf("no NetworkPolicy %s in deploy/base", name)
	return nil
}

// TestSetEgressRelabelsLivePod: a live change of a sandbox's network
// policy (PATCH) relabels its pod, acting as control under deploy/'s
// Role, so deploy/'s gateway-only NetworkPolicy selects the pod from
// then on (the apiserver lists it by that policy's selector), and stops
// selecting it when the policy is open again. A sandbox without a pod
// succeeds.
func TestSetEgressRelabelsLivePod(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := ctxT(t)
	gw := networkPolicy(t, "sandbox-egress-gateway-only")
	sel, err := metav1.LabelSelectorAsSelector(&gw.Spec.PodSelector)
	if err != nil {
		t.Fatal(err)
	}
	locked := func() []string {
		t.Helper()
		list, err := e.client.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, p := range list.Items {
			names = append(names, p.Name+"="+p.Labels[k8s.LabelEgress])
		}
		return names
	}
	spec := e.spec(t, "sbx-egress-live", "tuist-linux-medium")
	spec.Egress = "open"
	if _, err := e.prov.Provision(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if got := locked(); len(got) != 0 {
		t.Fatalf("an open sandbox's pod is gateway-only: %v", got)
	}
	for _, step := range []struct {
		mode string
		want string
	}{
		{"allowlist", "[sbx-egress-live=allowlist]"},
		{"none", "[sbx-egress-live=none]"},
		{"open", "[]"},
		{"none", "[sbx-egress-live=none]"},
		{"", "[]"},
	} {
		if err := e.prov.SetEgress(ctx, "sbx-egress-live", step.mode); err != nil {
			t.Fatalf("SetEgress %q: %v", step.mode, err)
		}
		if got := locked(); strings.Join(got, " ") != strings.Trim(step.want, "[]") {
			t.Errorf("after SetEgress %q the gateway-only policy selects %v; want %s", step.mode, got, step.want)
		}
	}
	if err := e.prov.SetEgress(ctx, "sbx-egress-nopod", "none"); err != nil {
		t.Errorf("SetEgress of a sandbox without a pod: %v", err)
	}
	if err := e.prov.SetEgress(ctx, "sbx-egress-live", "not a label value!"); err == nil {
		t.Error("SetEgress with a mode that is no label value succeeded")
	}
}
