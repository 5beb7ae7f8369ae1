package deploy_test

import (
	"path/filepath"
	"testing"

	"github.com/sbxedge/sbx/control/devseed"
	"github.com/sbxedge/sbx/control/provider/k8s"
)

// TestCatalogHoldsDevProfiles: every profile `sbx dev` seeds exists in the
// deployed catalog with the same platform, and its default is sbx dev's,
// so a command that works on sbx dev (`sbx create` without --profile
// among them) works on a cluster instead of answering 422.
func TestCatalogHoldsDevProfiles(t *testing.T) {
	t.Parallel()
	cat, err := k8s.LoadCatalog(filepath.Join("base", "catalog.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range append(devseed.Profiles, devseed.MacOSProfiles...) {
		shape, ok := cat.Shape(p.Name)
		if !ok {
			t.Errorf("sbx dev's profile %s is not in base/catalog.yaml", p.Name)
			continue
		}
		if shape.Platform != p.Platform {
			t.Errorf("profile %s: platform %s in the catalog, %s in sbx dev", p.Name, shape.Platform, p.Platform)
		}
	}
	if cat.DefaultProfile != devseed.DefaultProfile {
		t.Errorf("catalog defaultProfile %q; want sbx dev's %q", cat.DefaultProfile, devseed.DefaultProfile)
	}
}
