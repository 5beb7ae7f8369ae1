package k8s

import (
	"testing"

	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"

	"github.com/sbxedge/sbx/control/provider"
)

// TestPodsMeetRestricted runs every pod the provider builds (sandbox and
// warm, each platform) through the PodSecurity admission plugin's own
// checks at the restricted level, latest version: the level deploy/ sets
// on the sandbox namespace. A pod that fails here is refused by a real
// API server.
func TestPodsMeetRestricted(t *testing.T) {
	t.Parallel()
	p, cat := objectBuilder(t)
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	level := psapi.LevelVersion{Level: psapi.LevelRestricted, Version: psapi.LatestVersion()}
	for _, profile := range []string{"tuist-linux-medium", "tuist-macos-16-large"} {
		shape, _ := cat.Shape(profile)
		spec := &provider.Spec{SandboxID: "sbx-restricted", AccountID: "acct-1", Profile: shape.Name, Platform: shape.Platform}
		for _, role := range []string{RoleSandbox, RoleWarm} {
			t.Run(profile+"/"+role, func(t *testing.T) {
				s := spec
				if role == RoleWarm {
					s = nil // warm pods are built before any sandbox claims them
				}
				pod := p.pod(namesFor("sbx-restricted"), role, shape, s)
				for _, r := range eval.EvaluatePod(level, &pod.ObjectMeta, &pod.Spec) {
					if !r.Allowed {
						t.Errorf("restricted refuses the %s pod: %s: %s", role, r.ForbiddenReason, r.ForbiddenDetail)
					}
				}
			})
		}
	}
}
