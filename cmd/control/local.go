//go:build sbxlocal

package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"

	"github.com/sbxedge/sbx/control"
	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/provider/simfleet"
	"github.com/sbxedge/sbx/control/standalone"
)

// A control built with -tags sbxlocal also runs sandboxes on this
// machine (--provider local, the embedded server): replicas on one
// machine with their own Postgres and Redis, as `go run ./loadtest fleet`
// runs them. Its sandboxes live inside the control process that made
// them. Store and activity stay Postgres and Redis.
func init() {
	providers["local"] = standalone.Local{}
	// Not in the help and not for users: sandboxes that are only SSH
	// echo endpoints, for go run ./loadtest scale.
	providers[simfleetProvider] = simfleetOpener{}
}

// simfleetProvider selects package simfleet's simulated sandboxes; it
// is for load tests only, so the --provider help leaves it out.
const simfleetProvider = "internal-simfleet"

type simfleetOpener struct{}

// Open places the fleet at $SBX_SIMFLEET_BASE (a loopback address) when
// set, so two load tests on one machine keep apart.
func (simfleetOpener) Open(ctx context.Context, d control.ProviderDeps) (provider.Provider, error) {
	cfg := simfleet.Config{Logger: d.Logger}
	if v := os.Getenv("SBX_SIMFLEET_BASE"); v != "" {
		a, err := netip.ParseAddr(v)
		if err != nil {
			return nil, fmt.Errorf("SBX_SIMFLEET_BASE: %w", err)
		}
		cfg.Base = a
	}
	return simfleet.New(cfg)
}
