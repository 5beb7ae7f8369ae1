// Package k8s is the production provider: a sandbox is a Pod on the
// dedicated sandbox pool of its platform, with a PVC for the workspace
// (Linux), a Secret holding its host key, the user CA and its provisioning
// files, CSI VolumeSnapshots for suspend, an informer-based Pod Watcher
// and a per-shape warm pool claimed atomically in the database.
//
// Objects carry LabelSandbox; a cold-booted sandbox's pod is named after
// the sandbox, a claimed warm pod keeps its own name, so lookups go by
// label. Everything lives in one namespace, which is all the RBAC grants.
package k8s

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	gossh "golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/internal/initproto"
	"github.com/sbxedge/sbx/internal/podssh"
)

var (
	_ provider.Provider    = (*Provider)(nil)
	_ provider.Suspender   = (*Provider)(nil)
	_ provider.StopWatcher = (*Provider)(nil)

	_ provider.PlatformSuspender = (*Provider)(nil)
)

// Config configures the provider. Defaults are set in New.
type Config struct {
	// Namespace holds every sandbox object. Required.
	Namespace string
	// Catalog maps profiles to pools and warm replica counts. Required.
	Catalog Catalog
	// SSHPort is the port sandbox sshd listens on inside the pod. Above
	// 1024 so it runs without NET_BIND_SERVICE. Default 2222.
	SSHPort int
	// ForwardPort is the port of the init's podtcp forwarder, the
	// edge's plain-TCP road to the sandbox's ports. Default 2223.
	ForwardPort int
	// WorkspaceDir is the workspace mount path inside Linux pods (default
	// LinuxWorkspace). A "%s" in it is replaced by the pod name: the test
	// kubelet runs every pod on one filesystem and needs them apart.
	WorkspaceDir string
	// PollInterval paces readiness probes and snapshot polling. Default 500ms.
	PollInterval time.Duration
	// ReadyTimeout bounds one wait for a pod's sshd. Default 5 minutes.
	ReadyTimeout time.Duration
	// ReplenishInterval is how often the warm pool is topped up and
	// reconciled. Default 10s.
	ReplenishInterval time.Duration
	Logger            *slog.Logger
}

// Validate names the first bad field.
func (c Config) Validate() error {
	if c.Namespace == "" {
		return errors.New("k8s provider: Namespace is required")
	}
	if err := c.Catalog.Validate(); err != nil {
		return fmt.Errorf("k8s provider: Catalog: %w", err)
	}
	if c.SSHPort < 0 || c.SSHPort > 65535 {
		return fmt.Errorf("k8s provider: SSHPort %d out of range", c.SSHPort)
	}
	if c.ForwardPort < 0 || c.ForwardPort > 65535 {
		return fmt.Errorf("k8s provider: ForwardPort %d out of range", c.ForwardPort)
	}
	return nil
}

// Deps are the provider's clients. Warm is optional: without it every
// create cold boots.
type Deps struct {
	Client  kubernetes.Interface
	Dynamic dynamic.Interface
	Warm    WarmStore
	Metrics *Metrics
}

// Provider implements provider.Provider on Kubernetes. Start launches the
// Pod Watcher informer and the warm pool replenisher; Close stops both and
// waits for them.
type Provider struct {
	cfg     Config
	client  kubernetes.Interface
	dyn     dynamic.Interface
	warm    WarmStore
	log     *slog.Logger
	metrics *Metrics

	mu       sync.Mutex // guards stops, reported, cancel, started
	stops    []func(provider.Stop)
	reported map[string]bool // pod names already reported as stopped
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	started  bool
}

// New checks cfg and returns a provider that has started nothing.
func New(cfg Config, d Deps) (*Provider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Client == nil || d.Dynamic == nil {
		return nil, errors.New("k8s provider: Client and Dynamic are required")
	}
	cfg.SSHPort = cmp.Or(cfg.SSHPort, 2222)
	cfg.ForwardPort = cmp.Or(cfg.ForwardPort, 2223)
	cfg.WorkspaceDir = cmp.Or(cfg.WorkspaceDir, LinuxWorkspace)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, 500*time.Millisecond)
	cfg.ReadyTimeout = cmp.Or(cfg.ReadyTimeout, 5*time.Minute)
	cfg.ReplenishInterval = cmp.Or(cfg.ReplenishInterval, 10*time.Second)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Metrics == nil {
		d.Metrics = NewMetrics(nil)
	}
	return &Provider{
		cfg: cfg, client: d.Client, dyn: d.Dynamic, warm: d.Warm, metrics: d.Metrics,
		log:      cfg.Logger.With("provider", "k8s", "namespace", cfg.Namespace),
		reported: map[string]bool{},
	}, nil
}

func (p *Provider) pods() podsClient { return p.client.CoreV1().Pods(p.cfg.Namespace) }

type podsClient = interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Pod, error)
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error)
	Create(ctx context.Context, pod *corev1.Pod, opts metav1.CreateOptions) (*corev1.Pod, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

func selector(kv ...string) string {
	set := labels.Set{LabelManagedBy: managedBy}
	for i := 0; i+1 < len(kv); i += 2 {
		set[kv[i]] = kv[i+1]
	}
	return labels.SelectorFromSet(set).String()
}

// shapeFor is the spec's shape; warm replicas come from the catalog.
func (p *Provider) shapeFor(spec provider.Spec) (Shape, error) {
	if _, ok := p.cfg.Catalog.Pools[spec.Platform]; !ok {
		return Shape{}, fmt.Errorf("no sandbox pool for platform %q", spec.Platform)
	}
	s := Shape{
		Name: spec.Profile, Platform: spec.Platform, CPU: spec.CPU, MemoryMB: spec.MemoryMB,
		DiskGB: spec.DiskGB, Image: spec.Image,
	}
	if c, ok := p.cfg.Catalog.Shape(spec.Profile); ok {
		s.WarmReplicas = c.WarmReplicas
	}
	return s, nil
}

// podFor finds the sandbox's pod; nil when there is none.
func (p *Provider) podFor(ctx context.Context, sandboxID string) (*corev1.Pod, error) {
	list, err := p.pods().List(ctx, metav1.ListOptions{LabelSelector: selector(LabelSandbox, sandboxID)})
	if err != nil {
		return nil, fmt.Errorf("list pods of %s: %w", sandboxID, err)
	}
	var best *corev1.Pod
	for i := range list.Items {
		pod := &list.Items[i]
		if pod.DeletionTimestamp != nil {
			continue
		}
		if best == nil || terminal(best) && !terminal(pod) {
			best = pod
		}
	}
	return best, nil
}

// Provision claims a warm pod or cold boots one, then waits until its sshd
// answers with the sandbox's host key. A pod already running for the
// sandbox is reused (job retries); a pod that ended is replaced.
func (p *Provider) Provision(ctx context.Context, spec provider.Spec) (provider.Endpoint, error) {
	shape, pinned, pod, err := p.current(ctx, spec)
	if err != nil {
		return provider.Endpoint{}, err
	}
	if pod != nil && terminal(pod) {
		p.log.WarnContext(ctx, "replacing ended pod", "sandbox_id", spec.SandboxID, "pod", pod.Name, "reason", StopReason(pod))
		if err := p.deleteSandboxObjects(ctx, spec.SandboxID, false); err != nil {
			return provider.Endpoint{}, err
		}
		pod = nil
	}
	boot := BootCold
	name := spec.SandboxID
	if pod != nil {
		name = pod.Name
		if name != spec.SandboxID {
			// A claimed warm pod: bind again, in case the claim was
			// cut off between labelling the pod and handing it the
			// Secret. Binding is idempotent.
			if _, err := p.bindWarm(ctx, name, shape, spec); err != nil {
				return provider.Endpoint{}, err
			}
		}
	} else if spec.FromSnapshot != "" {
		// A fork: its own PVC from the snapshot, never a warm pod's.
		if err := p.userSnapshot(ctx, spec.FromSnapshot); err != nil {
			return provider.Endpoint{}, fmt.Errorf("provision %s: %w", spec.SandboxID, err)
		}
		if err := p.createObjects(ctx, namesFor(spec.SandboxID), shape, spec, spec.FromSnapshot); err != nil {
			return provider.Endpoint{}, err
		}
	} else if claimed, ok, err := p.claimWarm(ctx, shape, spec); err != nil {
		return provider.Endpoint{}, err
	} else if ok {
		name, boot = claimed, BootWarm
	} else if err := p.createObjects(ctx, namesFor(spec.SandboxID), shape, spec, ""); err != nil {
		return provider.Endpoint{}, err
	}
	ep, err := p.waitReady(ctx, name, shape.Platform, pinned)
	if err != nil {
		return provider.Endpoint{}, fmt.Errorf("provision %s: %w", spec.SandboxID, err)
	}
	if pod == nil {
		p.metrics.provisions.WithLabelValues(shape.Name, boot).Inc()
		p.log.InfoContext(ctx, "sandbox pod ready", "sandbox_id", spec.SandboxID, "pod", name, "boot", boot)
	}
	ep.Boot = boot
	return ep, nil
}

// Boot kinds reported in Endpoint.Boot and the provisions metric.
const (
	BootWarm = "warm_hit"
	BootCold = "cold_boot"
)

// current resolves what Provision and Restore both start from: the
// profile's shape, the host key to pin, and the sandbox's pod if one exists.
func (p *Provider) current(ctx context.Context, spec provider.Spec) (Shape, gossh.PublicKey, *corev1.Pod, error) {
	// Before any object is touched (a warm claim labels the pod first):
	// an Env the init could not deliver. The error names the variable,
	// not its value.
	if err := initproto.CheckEnv(spec.Env); err != nil {
		return Shape{}, nil, nil, fmt.Errorf("sandbox %s: %w", spec.SandboxID, err)
	}
	shape, err := p.shapeFor(spec)
	if err != nil {
		return Shape{}, nil, nil, err
	}
	pinned, err := pinnedKey(spec)
	if err != nil {
		return Shape{}, nil, nil, err
	}
	pod, err := p.podFor(ctx, spec.SandboxID)
	if err != nil {
		return Shape{}, nil, nil, err
	}
	return shape, pinned, pod, nil
}

func pinnedKey(spec provider.Spec) (gossh.PublicKey, error) {
	signer, err := gossh.ParsePrivateKey(spec.HostKeyPEM)
	if err != nil {
		return nil, fmt.Errorf("parse host key of %s: %w", spec.SandboxID, err)
	}
	return signer.PublicKey(), nil
}

// createObjects creates the Secret, the PVC (Linux; restored from
// fromSnapshot when set) and the Pod. Objects that exist already are kept,
// except the Secret, whose data is brought up to date.
func (p *Provider) createObjects(ctx context.Context, n names, shape Shape, spec provider.Spec, fromSnapshot string) error {
	sec, err := p.secret(n, RoleSandbox, shape, &spec)
	if err != nil {
		return err
	}
	secrets := p.client.CoreV1().Secrets(p.cfg.Namespace)
	if _, err := secrets.Create(ctx, sec, createOpts); apierrors.IsAlreadyExists(err) {
		if err := p.replaceSecret(ctx, sec); err != nil {
			return fmt.Errorf("update secret %s: %w", n.secret, err)
		}
	} else if err != nil {
		return fmt.Errorf("create secret %s: %w", n.secret, err)
	}
	if shape.Platform == PlatformLinux {
		if err := p.createPVC(ctx, p.pvc(n, RoleSandbox, shape, &spec, fromSnapshot)); err != nil {
			return err
		}
	}
	if _, err := p.pods().Create(ctx, p.pod(n, RoleSandbox, shape, &spec), createOpts); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create pod %s: %w", n.pod, err)
	}
	return nil
}

// waitReady polls the pod until it runs with an IP and its sshd presents
// the pinned host key, or the pod ends, or ReadyTimeout passes.
func (p *Provider) waitReady(ctx context.Context, podName, platform string, pinned gossh.PublicKey) (provider.Endpoint, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.ReadyTimeout)
	defer cancel()
	last := errors.New("pod not running yet")
	for {
		pod, err := p.pods().Get(ctx, podName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return provider.Endpoint{}, fmt.Errorf("pod %s vanished while starting", podName)
		case err != nil:
			last = err
		case terminal(pod):
			return provider.Endpoint{}, fmt.Errorf("pod %s ended while starting: %s", podName, StopReason(pod))
		case pod.Status.Phase == corev1.PodRunning && pod.Status.PodIP != "":
			ep := p.endpoint(pod, platform)
			if last = podssh.ProbeHostKey(ctx, ep.Addr, pinned); last == nil {
				return ep, nil
			}
		}
		select {
		case <-ctx.Done():
			return provider.Endpoint{}, fmt.Errorf("pod %s not ready: %w (last: %v)", podName, ctx.Err(), last)
		case <-time.After(p.cfg.PollInterval):
		}
	}
}

func (p *Provider) endpoint(pod *corev1.Pod, platform string) provider.Endpoint {
	ws := workspaceFor(platform)
	if platform == PlatformLinux {
		ws = p.workspaceDir(pod.Name)
	}
	return provider.Endpoint{
		Addr:        net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(p.cfg.SSHPort)),
		ForwardAddr: net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(p.cfg.ForwardPort)),
		User:        SandboxUser, Workspace: ws,
	}
}

// Destroy deletes the sandbox's pod, PVC, Secret and snapshots. Unknown
// sandboxes succeed.
func (p *Provider) Destroy(ctx context.Context, sandboxID string) error {
	if err := p.deleteSandboxObjects(ctx, sandboxID, true); err != nil {
		return err
	}
	if p.warm != nil {
		if err := p.warm.ReleaseWarmPod(ctx, sandboxID); err != nil {
			return fmt.Errorf("release warm claim of %s: %w", sandboxID, err)
		}
	}
	p.log.InfoContext(ctx, "sandbox destroyed", "sandbox_id", sandboxID)
	return nil
}

// deleteSandboxObjects deletes pods, PVCs and Secrets labelled with the
// sandbox, and its snapshots when withSnapshots.
func (p *Provider) deleteSandboxObjects(ctx context.Context, sandboxID string, withSnapshots bool) error {
	sel := metav1.ListOptions{LabelSelector: selector(LabelSandbox, sandboxID)}
	ns := p.cfg.Namespace
	pods, err := p.pods().List(ctx, sel)
	if err != nil {
		return fmt.Errorf("list pods of %s: %w", sandboxID, err)
	}
	for _, o := range pods.Items {
		if err := ignoreNotFound(p.pods().Delete(ctx, o.Name, metav1.DeleteOptions{})); err != nil {
			return fmt.Errorf("delete pod %s: %w", o.Name, err)
		}
	}
	pvcs, err := p.client.CoreV1().PersistentVolumeClaims(ns).List(ctx, sel)
	if err != nil {
		return fmt.Errorf("list pvcs of %s: %w", sandboxID, err)
	}
	for _, o := range pvcs.Items {
		if err := ignoreNotFound(p.client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, o.Name, metav1.DeleteOptions{})); err != nil {
			return fmt.Errorf("delete pvc %s: %w", o.Name, err)
		}
	}
	secrets, err := p.client.CoreV1().Secrets(ns).List(ctx, sel)
	if err != nil {
		return fmt.Errorf("list secrets of %s: %w", sandboxID, err)
	}
	for _, o := range secrets.Items {
		if err := ignoreNotFound(p.client.CoreV1().Secrets(ns).Delete(ctx, o.Name, metav1.DeleteOptions{})); err != nil {
			return fmt.Errorf("delete secret %s: %w", o.Name, err)
		}
	}
	if withSnapshots {
		return p.deleteSnapshots(ctx, sandboxID, "")
	}
	return nil
}

// createPVC creates pvc unless it exists. One that exists but is being
// deleted (a suspend's claim, held by the pvc-protection finalizer until
// its pod is gone) is waited out first: a new pod must not mount a
// claim that is about to vanish.
func (p *Provider) createPVC(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	pvcs := p.client.CoreV1().PersistentVolumeClaims(p.cfg.Namespace)
	for {
		_, err := pvcs.Create(ctx, pvc, createOpts)
		if err == nil {
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create pvc %s: %w", pvc.Name, err)
		}
		cur, err := pvcs.Get(ctx, pvc.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("get pvc %s: %w", pvc.Name, err)
		}
		if cur.DeletionTimestamp == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pvc %s still terminating: %w", pvc.Name, ctx.Err())
		case <-time.After(p.cfg.PollInterval):
		}
	}
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// Status reports one sandbox: its pod's phase, or PhaseStopped when only a
// suspend snapshot is left.
func (p *Provider) Status(ctx context.Context, sandboxID string) (provider.Instance, error) {
	pod, err := p.podFor(ctx, sandboxID)
	if err != nil {
		return provider.Instance{}, err
	}
	if pod != nil {
		return p.instance(pod), nil
	}
	snaps, err := p.snapshots(ctx, sandboxID)
	if err != nil {
		return provider.Instance{}, err
	}
	if len(snaps) > 0 {
		return provider.Instance{SandboxID: sandboxID, Phase: provider.PhaseStopped}, nil
	}
	return provider.Instance{SandboxID: sandboxID, Phase: provider.PhaseNotFound}, provider.ErrNotFound
}

func (p *Provider) instance(pod *corev1.Pod) provider.Instance {
	in := provider.Instance{SandboxID: pod.Labels[LabelSandbox]}
	switch {
	case terminal(pod):
		in.Phase, in.Reason = provider.PhaseFailed, StopReason(pod)
	case pod.Status.Phase == corev1.PodRunning && pod.Status.PodIP != "":
		in.Phase, in.Endpoint = provider.PhaseRunning, p.endpoint(pod, pod.Labels[LabelPlatform])
	default:
		in.Phase, in.Reason = provider.PhaseStopped, "pod_pending"
	}
	return in
}

// List reports every sandbox with a pod or a snapshot, for reconciliation.
// Warm pods are not sandboxes and are left to the warm pool.
func (p *Provider) List(ctx context.Context) ([]provider.Instance, error) {
	pods, err := p.pods().List(ctx, metav1.ListOptions{LabelSelector: selector(LabelRole, RoleSandbox)})
	if err != nil {
		return nil, fmt.Errorf("list sandbox pods: %w", err)
	}
	seen := map[string]bool{}
	var out []provider.Instance
	for i := range pods.Items {
		pod := &pods.Items[i]
		id := pod.Labels[LabelSandbox]
		if id == "" || seen[id] || pod.DeletionTimestamp != nil {
			continue
		}
		seen[id] = true
		out = append(out, p.instance(pod))
	}
	snaps, err := p.snapshots(ctx, "")
	if err != nil {
		return nil, err
	}
	for _, s := range snaps {
		id := s.GetLabels()[LabelSandbox]
		if id != "" && !seen[id] {
			seen[id] = true
			out = append(out, provider.Instance{SandboxID: id, Phase: provider.PhaseStopped})
		}
	}
	return out, nil
}

func (p *Provider) workspaceDir(podName string) string {
	return expandPod(p.cfg.WorkspaceDir, podName)
}

// Name is what webhook messages call this provider.
func (p *Provider) Name() string { return "k8s" }
