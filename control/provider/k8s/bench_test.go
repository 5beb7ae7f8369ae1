package k8s_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/provider/k8s"
)

// BenchmarkCreateToReady times Provision, from the call until the pod
// answers SSH with the sandbox's host key, through the real apiserver and
// the test kubelet: a warm hit (a pre-started pod claimed and handed its
// Secret) against a cold boot (Secret, PVC and pod created), in the same
// run. The pool is refilled outside the timer.
//
//	go test -run '^$' -bench CreateToReady -count 3 ./control/provider/k8s/
func BenchmarkCreateToReady(b *testing.B) {
	for _, c := range []struct {
		name    string
		profile string
		boot    string
	}{
		{"warm", "tuist-linux-warm", k8s.BootWarm},
		{"cold", "tuist-linux-medium", k8s.BootCold},
	} {
		b.Run(c.name, func(b *testing.B) {
			st := openSQLite(b)
			e := newEnv(b, st)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			i := 0
			for b.Loop() {
				b.StopTimer()
				if c.boot == k8s.BootWarm {
					replenishUntil(b, e.prov, st, "a free warm pod", func(free map[string]string) bool { return len(free) > 0 })
				}
				spec := e.spec(b, fmt.Sprintf("sbx-bench-%s-%d", c.name, i), c.profile)
				i++
				b.StartTimer()
				ep, err := e.prov.Provision(ctx, spec)
				if err != nil {
					b.Fatal(err)
				}
				if ep.Boot != c.boot {
					b.Fatalf("boot %s, want %s", ep.Boot, c.boot)
				}
			}
		})
	}
}
