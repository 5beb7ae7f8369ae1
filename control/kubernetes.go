package control

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sbxedge/sbx/control/provider/k8s"
	"github.com/sbxedge/sbx/control/provider/local"
	"github.com/sbxedge/sbx/control/store"
)

// KubernetesConfig selects the k8s provider (production): sandboxes are
// pods in Provider.Namespace, shaped by Provider.Catalog.
type KubernetesConfig struct {
	Provider k8s.Config
	// Kubeconfig is a kubeconfig file; empty means the in-cluster service
	// account, which is how control runs in deploy/.
	Kubeconfig string
	// Client and Dynamic, when set, are used instead of building clients
	// (tests pass client-go's fakes).
	Client  kubernetes.Interface
	Dynamic dynamic.Interface
}

// openProvider builds the configured provider: k8s when cfg.Kubernetes is
// set, else the local one. The k8s provider gets the store as its warm
// pool table, and the catalog's profiles are written to the store so the
// API offers exactly what the cluster can run.
func openProvider(ctx context.Context, cfg Config, st store.Store) (closingProvider, error) {
	if cfg.Kubernetes == nil {
		lp, err := local.New(local.Config{DataDir: cfg.DataDir, Mode: cfg.ProviderMode, Logger: cfg.Logger})
		if err != nil {
			return nil, fmt.Errorf("start local provider: %w", err)
		}
		return lp, nil
	}
	kc := *cfg.Kubernetes
	if kc.Client == nil || kc.Dynamic == nil {
		rc, err := restConfig(kc.Kubeconfig)
		if err != nil {
			return nil, err
		}
		if kc.Client, err = kubernetes.NewForConfig(rc); err != nil {
			return nil, fmt.Errorf("kubernetes client: %w", err)
		}
		if kc.Dynamic, err = dynamic.NewForConfig(rc); err != nil {
			return nil, fmt.Errorf("kubernetes dynamic client: %w", err)
		}
	}
	pc := kc.Provider
	if pc.Logger == nil {
		pc.Logger = cfg.Logger
	}
	warm, _ := st.(k8s.WarmStore)
	p, err := k8s.New(pc, k8s.Deps{Client: kc.Client, Dynamic: kc.Dynamic, Warm: warm, Metrics: k8s.NewMetrics(cfg.Registry)})
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

// startProvider subscribes lifecycle to pod stops and starts the k8s
// provider's Pod Watcher and warm pool, before reconciliation reads state.
func (s *Service) startProvider(ctx context.Context) error {
	s.Life.WatchStops()
	kp, ok := s.prov.(*k8s.Provider)
	if !ok {
		return nil // the local provider has no background work
	}
	if err := kp.Start(ctx); err != nil {
		return fmt.Errorf("start provider: %w", err)
	}
	return nil
}

var errKubernetesConfig = errors.New("control: Kubernetes")

func (c *KubernetesConfig) validate() error {
	if err := c.Provider.Validate(); err != nil {
		return fmt.Errorf("%w: %w", errKubernetesConfig, err)
	}
	return nil
}
