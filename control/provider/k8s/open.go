package k8s

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sbxedge/sbx/control/store"
)

// Setup is how a binary asks for the provider: sandboxes are pods in
// Config.Namespace, shaped by Config.Catalog.
type Setup struct {
	Config Config
	// Kubeconfig is a kubeconfig file; empty means the in-cluster service
	// account, which is how control runs in deploy/.
	Kubeconfig string
	// Client and Dynamic, when set, are used instead of building clients
	// (tests pass client-go's fakes).
	Client  kubernetes.Interface
	Dynamic dynamic.Interface
}

// Open builds the clients (unless given) and the provider. st is its warm
// pool table, and the catalog's profiles are written to it so the API
// offers exactly what the cluster can run. Start the provider (Pod
// Watcher, warm pool) before reconciling.
func Open(ctx context.Context, s Setup, st store.Store, reg prometheus.Registerer, log *slog.Logger) (*Provider, error) {
	if err := s.Config.Validate(); err != nil {
		return nil, fmt.Errorf("kubernetes provider: %w", err)
	}
	if s.Client == nil || s.Dynamic == nil {
		rc, err := restConfig(s.Kubeconfig)
		if err != nil {
			return nil, err
		}
		if s.Client, err = kubernetes.NewForConfig(rc); err != nil {
			return nil, fmt.Errorf("kubernetes client: %w", err)
		}
		if s.Dynamic, err = dynamic.NewForConfig(rc); err != nil {
			return nil, fmt.Errorf("kubernetes dynamic client: %w", err)
		}
	}
	pc := s.Config
	if pc.Logger == nil {
		pc.Logger = log
	}
	warm, _ := st.(WarmStore)
	p, err := New(pc, Deps{Client: s.Client, Dynamic: s.Dynamic, Warm: warm, Metrics: NewMetrics(reg)})
	if err != nil {
		return nil, err
	}
	err = st.InTx(ctx, func(tx store.Tx) error {
		for _, s := range pc.Catalog.Profiles {
			prof := store.Profile{Name: s.Name, Platform: s.Platform, CPU: s.CPU, MemoryMB: s.MemoryMB, DiskGB: s.DiskGB, Image: s.Image}
			if err := tx.UpsertProfile(ctx, prof); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("write catalog profiles: %w", err)
	}
	return p, nil
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
		}
		return rc, nil
	}
	rc, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("in-cluster kubernetes config (set a kubeconfig outside a cluster): %w", err)
	}
	return rc, nil
}
