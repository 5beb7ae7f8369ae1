package k8s

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/store"
)

// WarmStore is the warm pool's table (migration 0006). The claim is one
// statement, so concurrent creates on any number of replicas never get
// the same pod.
type WarmStore interface {
	// AddWarmPod records a booted, unclaimed pod. Recording one twice is
	// a no-op.
	AddWarmPod(ctx context.Context, w store.WarmPod) error
	// ClaimWarmPod claims the oldest unclaimed pod of profile for
	// sandboxID and returns its name, or the pod sandboxID claimed
	// already; "" when the pool is empty.
	ClaimWarmPod(ctx context.Context, profile, sandboxID string) (string, error)
	// WarmPods lists every row, claimed or not.
	WarmPods(ctx context.Context) ([]store.WarmPod, error)
	// RemoveWarmPod forgets a pod whatever its claim (a claimed pod that
	// turned out unusable).
	RemoveWarmPod(ctx context.Context, pod string) error
	// RemoveFreeWarmPod forgets a pod only while it is unclaimed and
	// reports whether it did: a claim racing the replenisher wins.
	RemoveFreeWarmPod(ctx context.Context, pod string) (bool, error)
	// ReleaseWarmPod forgets the pod sandboxID claimed, when it ends.
	ReleaseWarmPod(ctx context.Context, sandboxID string) error
	// WithWarmLock runs fn if no other replica is running it right now
	// and reports whether it ran; replenishing on two replicas at once
	// would overshoot the replica count.
	WithWarmLock(ctx context.Context, fn func(context.Context) error) (bool, error)
}

// claimWarm takes a warm pod for the sandbox and hands it the sandbox's
// Secret data and labels. A claimed pod that turns out unusable is dropped
// and the next one tried; an empty pool means cold boot.
func (p *Provider) claimWarm(ctx context.Context, shape Shape, spec provider.Spec) (string, bool, error) {
	if p.warm == nil || shape.WarmReplicas == 0 {
		return "", false, nil
	}
	for range 3 {
		name, err := p.warm.ClaimWarmPod(ctx, shape.Name, spec.SandboxID)
		if err != nil {
			return "", false, fmt.Errorf("claim warm pod for %s: %w", shape.Name, err)
		}
		if name == "" {
			p.metrics.warmClaims.WithLabelValues(shape.Name, "miss").Inc()
			return "", false, nil
		}
		usable, err := p.bindWarm(ctx, name, shape, spec)
		if err != nil {
			return "", false, err
		}
		if usable {
			p.metrics.warmClaims.WithLabelValues(shape.Name, "hit").Inc()
			return name, true, nil
		}
		p.log.WarnContext(ctx, "claimed warm pod unusable; dropping it", "pod", name, "sandbox_id", spec.SandboxID)
		if err := p.retireWarm(ctx, name); err != nil {
			return "", false, err
		}
	}
	return "", false, nil
}

// bindWarm turns a warm pod into the sandbox's: the Secret gets the host
// key, CA and files (the pod's init starts sshd once they appear), then the
// Secret, PVC and Pod get the sandbox's labels. It reports false when the
// pod is gone or ended.
func (p *Provider) bindWarm(ctx context.Context, name string, shape Shape, spec provider.Spec) (bool, error) {
	n := namesFor(name)
	pod, err := p.pods().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("get warm pod %s: %w", name, err)
	}
	if terminal(pod) || pod.DeletionTimestamp != nil {
		return false, nil
	}
	claimShape := shape
	claimShape.Image = pod.Annotations[AnnotImage] // an older image serves until claimed
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels":      labelsFor(RoleSandbox, claimShape, &spec),
		"annotations": annotationsFor(claimShape, &spec),
	}})
	if err != nil {
		return false, err
	}
	// Labels first: from here the pod is the sandbox's (Destroy finds it,
	// the replenisher leaves it alone), and a retried Provision finds it
	// and binds again. Only then the Secret, which makes the pod's init
	// start sshd with the sandbox's host key.
	if _, err := p.client.CoreV1().Pods(p.cfg.Namespace).Patch(ctx, name, types.MergePatchType, patch, patchOpts); err != nil {
		return false, fmt.Errorf("label pod %s for %s: %w", name, spec.SandboxID, err)
	}
	if shape.Platform == PlatformLinux {
		if _, err := p.client.CoreV1().PersistentVolumeClaims(p.cfg.Namespace).Patch(ctx, n.pvc, types.MergePatchType, patch, patchOpts); err != nil {
			return false, fmt.Errorf("label pvc %s for %s: %w", n.pvc, spec.SandboxID, err)
		}
	}
	sec, err := p.secret(n, RoleSandbox, claimShape, &spec)
	if err != nil {
		return false, err
	}
	if err := p.replaceSecret(ctx, sec); err != nil {
		return false, fmt.Errorf("hand secret %s to %s: %w", n.secret, spec.SandboxID, err)
	}
	return true, nil
}

// retireFree retires a recorded warm pod unless a create claimed it since
// the replenisher read the rows: the row goes first, conditionally, so a
// pod a sandbox now owns is never deleted.
func (p *Provider) retireFree(ctx context.Context, name string) error {
	removed, err := p.warm.RemoveFreeWarmPod(ctx, name)
	if err != nil {
		return fmt.Errorf("retire warm pod %s: %w", name, err)
	}
	if !removed {
		return nil
	}
	return p.retireWarm(ctx, name)
}

// retireWarm deletes a warm pod's objects and its row.
func (p *Provider) retireWarm(ctx context.Context, name string) error {
	n := namesFor(name)
	ns := p.cfg.Namespace
	if err := ignoreNotFound(p.pods().Delete(ctx, n.pod, metav1.DeleteOptions{})); err != nil {
		return fmt.Errorf("retire warm pod %s: %w", name, err)
	}
	if err := ignoreNotFound(p.client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, n.pvc, metav1.DeleteOptions{})); err != nil {
		return fmt.Errorf("retire warm pvc %s: %w", n.pvc, err)
	}
	if err := ignoreNotFound(p.client.CoreV1().Secrets(ns).Delete(ctx, n.secret, metav1.DeleteOptions{})); err != nil {
		return fmt.Errorf("retire warm secret %s: %w", n.secret, err)
	}
	if err := p.warm.RemoveWarmPod(ctx, name); err != nil {
		return fmt.Errorf("retire warm pod %s: %w", name, err)
	}
	return nil
}

func (p *Provider) replenishLoop(ctx context.Context) {
	t := time.NewTicker(p.cfg.ReplenishInterval)
	defer t.Stop()
	for {
		if _, err := p.warm.WithWarmLock(ctx, p.Replenish); err != nil && ctx.Err() == nil {
			p.log.Warn("warm pool replenish failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Replenish reconciles the warm pool once: rows whose pod vanished or
// ended go, booted pods get their row, pods of profiles no longer warm are
// retired, and each profile is topped up to its warm replicas with pods of
// the catalog's current image. Pods of an older image count until claimed,
// so an image roll drains the pool as it is used.
func (p *Provider) Replenish(ctx context.Context) error {
	rows, err := p.warm.WarmPods(ctx)
	if err != nil {
		return fmt.Errorf("list warm rows: %w", err)
	}
	list, err := p.pods().List(ctx, metav1.ListOptions{LabelSelector: selector(LabelRole, RoleWarm)})
	if err != nil {
		return fmt.Errorf("list warm pods: %w", err)
	}
	pods := map[string]*corev1.Pod{}
	for i := range list.Items {
		pods[list.Items[i].Name] = &list.Items[i]
	}
	have := map[string]int{}
	recorded := map[string]bool{}
	free := map[string][]store.WarmPod{}
	for _, r := range rows {
		recorded[r.Pod] = true
		if r.ClaimedBy != "" {
			continue // the sandbox owns it now; Destroy releases the row
		}
		pod, ok := pods[r.Pod]
		if !ok || terminal(pod) {
			// Not among the warm pods: gone, ended, or relabelled by a
			// claim after the rows were read.
			if err := p.retireFree(ctx, r.Pod); err != nil {
				return err
			}
			continue
		}
		free[r.Profile] = append(free[r.Profile], r)
	}
	for profile, list := range free {
		want := 0
		shape, ok := p.cfg.Catalog.Shape(profile)
		if ok {
			want = shape.WarmReplicas
		}
		// Surplus (fewer replicas wanted, or the profile left the
		// catalog) goes, pods of an older image first.
		sort.SliceStable(list, func(i, j int) bool {
			return list[i].Image != shape.Image && list[j].Image == shape.Image
		})
		for len(list) > want {
			if err := p.retireFree(ctx, list[0].Pod); err != nil {
				return err
			}
			list = list[1:]
		}
		have[profile] = len(list)
	}
	for name, pod := range pods {
		profile := pod.Labels[LabelProfile]
		shape, ok := p.cfg.Catalog.Shape(profile)
		switch {
		case recorded[name]:
		case !ok || shape.WarmReplicas == 0 || terminal(pod):
			if err := p.retireWarm(ctx, name); err != nil {
				return err
			}
		case pod.Status.Phase == corev1.PodRunning:
			// Booted: its init waits for a Secret with a host key.
			if err := p.warm.AddWarmPod(ctx, store.WarmPod{Pod: name, Profile: profile, Image: pod.Annotations[AnnotImage]}); err != nil {
				return fmt.Errorf("record warm pod %s: %w", name, err)
			}
			have[profile]++
		default:
			have[profile]++ // still booting
		}
	}
	for _, shape := range p.cfg.Catalog.Profiles {
		for i := have[shape.Name]; i < shape.WarmReplicas; i++ {
			if err := p.createWarm(ctx, shape); err != nil {
				return err
			}
		}
	}
	return nil
}

func (p *Provider) createWarm(ctx context.Context, shape Shape) error {
	n := namesFor(warmName(shape.Name))
	sec, err := p.secret(n, RoleWarm, shape, nil)
	if err != nil {
		return err
	}
	if _, err := p.client.CoreV1().Secrets(p.cfg.Namespace).Create(ctx, sec, createOpts); err != nil {
		return fmt.Errorf("create warm secret %s: %w", n.secret, err)
	}
	if shape.Platform == PlatformLinux {
		if _, err := p.client.CoreV1().PersistentVolumeClaims(p.cfg.Namespace).Create(ctx, p.pvc(n, RoleWarm, shape, nil, ""), createOpts); err != nil {
			return fmt.Errorf("create warm pvc %s: %w", n.pvc, err)
		}
	}
	if _, err := p.pods().Create(ctx, p.pod(n, RoleWarm, shape, nil), createOpts); err != nil {
		return fmt.Errorf("create warm pod %s: %w", n.pod, err)
	}
	p.log.InfoContext(ctx, "warm pod created", "pod", n.pod, "profile", shape.Name, "image", shape.Image)
	return nil
}

// warmName is "warm-<profile>-<8 random base32 chars>", within the
// 63-character label limit the pod's hostname needs.
func warmName(profile string) string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	const alphabet = "abcdefghijklmnopqrstuvwxyz234567"
	var sb strings.Builder
	v := uint64(b[0])<<32 | uint64(b[1])<<24 | uint64(b[2])<<16 | uint64(b[3])<<8 | uint64(b[4])
	for range 8 {
		sb.WriteByte(alphabet[v&31])
		v >>= 5
	}
	return "warm-" + profile + "-" + sb.String()
}
