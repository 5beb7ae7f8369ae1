package main

import (
	"strings"
	"testing"
)

func TestProviderFlags(t *testing.T) {
	t.Parallel()
	base := []string{"--data-dir", t.TempDir(), "--no-idle-offload"}
	c, _, err := parseConfig(append(base, "--provider", "k8s", "--k8s-namespace", "sbx-test",
		"--k8s-catalog", "../../control/provider/k8s/testdata/catalog.yaml"), secretEnv)
	if err != nil {
		t.Fatal(err)
	}
	if k, ok := c.Provider.(*kubernetes); !ok || k.Config.Namespace != "sbx-test" || len(k.Config.Catalog.Profiles) != 3 {
		t.Errorf("k8s config %+v; want namespace sbx-test and the catalog's 3 profiles", c.Provider)
	}
	c, _, err = parseConfig(base, secretEnv)
	if err != nil || c.Provider != nil {
		t.Errorf("default provider: %+v, %v; want local (no provider injected)", c.Provider, err)
	}
	// The simulated fleet is for load tests: selectable, never advertised.
	c, _, err = parseConfig(append(base, "--provider", simfleetProvider), secretEnv)
	if _, ok := c.Provider.(simfleetOpener); err != nil || !ok {
		t.Errorf("--provider %s: %+v, %v; want the simulated fleet", simfleetProvider, c.Provider, err)
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
