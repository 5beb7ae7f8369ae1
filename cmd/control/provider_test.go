package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/sbxedge/sbx/internal/testkit/depcheck"
)

func TestProviderFlags(t *testing.T) {
	t.Parallel()
	base := required(t)
	c, _, err := parseConfig(append(base, "--provider", "k8s", "--k8s-namespace", "sbx-test"), secretEnv)
	if err != nil {
		t.Fatal(err)
	}
	if k, ok := c.Provider.(*kubernetes); !ok || k.Config.Namespace != "sbx-test" || len(k.Config.Catalog.Profiles) != 3 {
		t.Errorf("k8s config %+v; want namespace sbx-test and the catalog's 3 profiles", c.Provider)
	}
	c, _, err = parseConfig(base, secretEnv)
	if _, ok := c.Provider.(*kubernetes); err != nil || !ok {
		t.Errorf("default provider: %+v, %v; want k8s, the one this binary links", c.Provider, err)
	}
	if _, _, err := parseConfig(append(base, "--provider", "local"), secretEnv); err == nil || !strings.Contains(err.Error(), "sbx dev") {
		t.Errorf("--provider local: %v; want a refusal pointing at sbx dev", err)
	}
	for _, bad := range [][]string{
		{"--provider", "nomad"},
		{"--provider", "k8s", "--k8s-catalog", "/nonexistent/catalog.yaml"},
	} {
		if _, _, err := parseConfig(append(base, bad...), secretEnv); err == nil || !strings.Contains(err.Error(), "--") {
			t.Errorf("parseConfig %v: %v; want a flag error", bad, err)
		}
	}
}

// TestLocalBuild: the build with -tags sbxlocal (a fleet on one machine)
// compiles, offers --provider local, and links the local provider the
// default build does not.
func TestLocalBuild(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	out, err := exec.Command("go", "list", "-tags", "sbxlocal", "-deps", ".").CombinedOutput()
	for _, p := range []string{"local", "simfleet"} {
		if err != nil || !strings.Contains(string(out), depcheck.Module+"/control/provider/"+p+"\n") {
			t.Fatalf("go list -tags sbxlocal: %v; want it to link the %s provider\n%.2000s", err, p, out)
		}
	}
	if out, err := exec.Command("go", "vet", "-tags", "sbxlocal", ".").CombinedOutput(); err != nil {
		t.Fatalf("go vet -tags sbxlocal: %v\n%s", err, out)
	}
}
