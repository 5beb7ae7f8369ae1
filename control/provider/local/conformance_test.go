package local_test

import (
	"testing"

	"github.com/sbxedge/sbx/control/provider/local"
	"github.com/sbxedge/sbx/control/provider/providertest"
)

// TestConformance runs the provider suite on both server modes.
func TestConformance(t *testing.T) {
	for _, mode := range modes(t) {
		t.Run(mode, func(t *testing.T) {
			providertest.Run(t, func(t *testing.T) providertest.Env {
				l, err := local.New(local.Config{DataDir: t.TempDir(), Mode: mode})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { l.Close() })
				return providertest.Env{Provider: l}
			})
		})
	}
}
