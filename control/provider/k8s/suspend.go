package k8s

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sbxedge/sbx/control/provider"
)

// The CSI external-snapshotter API, used through the dynamic client so the
// provider needs no generated clientset for one resource.
const snapshotGroup = "snapshot.storage.k8s.io"

// SnapshotGVR is the VolumeSnapshot resource.
var SnapshotGVR = schema.GroupVersionResource{Group: snapshotGroup, Version: "v1", Resource: "volumesnapshots"}

// annotSnapshot on a workspace PVC names the snapshot a suspend in
// progress takes of it, so a retried suspend waits for the same one.
const (
	annotSnapshot  = "sbx.dev/snapshot"
	annotCreatedAt = "sbx.dev/created-at"
)

// Suspend snapshots the workspace PVC, waits until the snapshot is ready to
// use, then deletes pod, PVC and Secret. Older snapshots of the sandbox go
// once the new one is ready. macOS sandboxes cannot be suspended in v1:
// Suspend returns provider.ErrSuspendUnsupported and they stay ready.
func (p *Provider) Suspend(ctx context.Context, sandboxID string) error {
	pod, err := p.podFor(ctx, sandboxID)
	if err != nil {
		return err
	}
	if pod == nil {
		if snaps, err := p.snapshots(ctx, sandboxID); err == nil && len(snaps) > 0 {
			return nil // suspended by an earlier attempt
		}
		return fmt.Errorf("suspend %s: %w", sandboxID, provider.ErrNotFound)
	}
	if pod.Labels[LabelPlatform] != PlatformLinux {
		return fmt.Errorf("suspend %s (%s): %w", sandboxID, pod.Labels[LabelPlatform], provider.ErrSuspendUnsupported)
	}
	pvcName := workspaceClaim(pod)
	if pvcName == "" {
		return fmt.Errorf("suspend %s: pod %s has no workspace volume", sandboxID, pod.Name)
	}
	pvcs := p.client.CoreV1().PersistentVolumeClaims(p.cfg.Namespace)
	pvc, err := pvcs.Get(ctx, pvcName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("suspend %s: get pvc %s: %w", sandboxID, pvcName, err)
	}
	snapName := pvc.Annotations[annotSnapshot]
	if snapName == "" {
		snapName = fmt.Sprintf("%s-%d", sandboxID, time.Now().UnixNano())
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, annotSnapshot, snapName)
		if _, err := pvcs.Patch(ctx, pvcName, types.MergePatchType, []byte(patch), patchOpts); err != nil {
			return fmt.Errorf("suspend %s: record snapshot name: %w", sandboxID, err)
		}
	}
	if err := p.createSnapshot(ctx, snapName, pvcName, pod); err != nil {
		return fmt.Errorf("suspend %s: %w", sandboxID, err)
	}
	if err := p.waitSnapshot(ctx, snapName); err != nil {
		return fmt.Errorf("suspend %s: %w", sandboxID, err)
	}
	if err := p.deleteSandboxObjects(ctx, sandboxID, false); err != nil {
		return fmt.Errorf("suspend %s: release pod: %w", sandboxID, err)
	}
	if err := p.deleteSnapshots(ctx, sandboxID, snapName); err != nil {
		return fmt.Errorf("suspend %s: drop older snapshots: %w", sandboxID, err)
	}
	p.log.InfoContext(ctx, "sandbox suspended", "sandbox_id", sandboxID, "snapshot", snapName)
	return nil
}

// CanSuspend reports whether sandboxes of platform can be suspended: Linux
// only in v1 (macOS has no incremental VM snapshot; see the product spec).
func (p *Provider) CanSuspend(platform string) bool { return platform == PlatformLinux }

func workspaceClaim(pod *corev1.Pod) string {
	for _, v := range pod.Spec.Volumes {
		if v.Name == "workspace" && v.PersistentVolumeClaim != nil {
			return v.PersistentVolumeClaim.ClaimName
		}
	}
	return ""
}

func (p *Provider) createSnapshot(ctx context.Context, name, pvcName string, pod *corev1.Pod) error {
	spec := map[string]any{"source": map[string]any{"persistentVolumeClaimName": pvcName}}
	if c := p.cfg.Catalog.Pools[PlatformLinux].VolumeSnapshotClassName; c != "" {
		spec["volumeSnapshotClassName"] = c
	}
	lbls := map[string]any{}
	for _, k := range []string{LabelManagedBy, LabelSandbox, LabelAccount, LabelProfile, LabelPlatform} {
		if v, ok := pod.Labels[k]; ok {
			lbls[k] = v
		}
	}
	lbls[LabelRole] = RoleSandbox
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": snapshotGroup + "/v1",
		"kind":       "VolumeSnapshot",
		"metadata": map[string]any{
			"name": name, "namespace": p.cfg.Namespace, "labels": lbls,
			"annotations": map[string]any{annotCreatedAt: time.Now().UTC().Format(time.RFC3339Nano)},
		},
		"spec": spec,
	}}
	_, err := p.dyn.Resource(SnapshotGVR).Namespace(p.cfg.Namespace).Create(ctx, obj, createOpts)
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create volume snapshot %s: %w", name, err)
	}
	return nil
}

// waitSnapshot polls until status.readyToUse, or status.error, or ctx.
func (p *Provider) waitSnapshot(ctx context.Context, name string) error {
	for {
		obj, err := p.dyn.Resource(SnapshotGVR).Namespace(p.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("get volume snapshot %s: %w", name, err)
		}
		if ready, _, _ := unstructured.NestedBool(obj.Object, "status", "readyToUse"); ready {
			return nil
		}
		if msg, ok, _ := unstructured.NestedString(obj.Object, "status", "error", "message"); ok && msg != "" {
			return fmt.Errorf("volume snapshot %s failed: %s", name, msg)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("volume snapshot %s not ready: %w", name, context.Cause(ctx))
		case <-time.After(p.cfg.PollInterval):
		}
	}
}

// snapshots lists the sandbox's snapshots (every sandbox's when id is
// empty), newest first.
func (p *Provider) snapshots(ctx context.Context, sandboxID string) ([]unstructured.Unstructured, error) {
	sel := selector()
	if sandboxID != "" {
		sel = selector(LabelSandbox, sandboxID)
	}
	list, err := p.dyn.Resource(SnapshotGVR).Namespace(p.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("list volume snapshots: %w", err)
	}
	items := list.Items
	sort.SliceStable(items, func(i, j int) bool {
		return items[i].GetAnnotations()[annotCreatedAt] > items[j].GetAnnotations()[annotCreatedAt]
	})
	return items, nil
}

// deleteSnapshots deletes the sandbox's snapshots except keep.
func (p *Provider) deleteSnapshots(ctx context.Context, sandboxID, keep string) error {
	snaps, err := p.snapshots(ctx, sandboxID)
	if err != nil {
		return err
	}
	for _, s := range snaps {
		if s.GetName() == keep {
			continue
		}
		if err := ignoreNotFound(p.dyn.Resource(SnapshotGVR).Namespace(p.cfg.Namespace).Delete(ctx, s.GetName(), metav1.DeleteOptions{})); err != nil {
			return fmt.Errorf("delete volume snapshot %s: %w", s.GetName(), err)
		}
	}
	return nil
}

// Restore brings a suspended sandbox back: a PVC from its newest ready
// snapshot and a new pod, never a warm pod (the workspace is the
// sandbox's own). A sandbox whose pod runs already is just waited on.
func (p *Provider) Restore(ctx context.Context, spec provider.Spec) (provider.Endpoint, error) {
	if spec.FromSnapshot != "" {
		return p.restoreInPlace(ctx, spec)
	}
	shape, pinned, pod, err := p.current(ctx, spec)
	if err != nil {
		return provider.Endpoint{}, err
	}
	name := spec.SandboxID
	if pod != nil && !terminal(pod) {
		name = pod.Name
	} else {
		if pod != nil {
			if err := p.deleteSandboxObjects(ctx, spec.SandboxID, false); err != nil {
				return provider.Endpoint{}, fmt.Errorf("restore %s: drop ended pod: %w", spec.SandboxID, err)
			}
		}
		snap, err := p.readySnapshot(ctx, spec.SandboxID)
		if err != nil {
			return provider.Endpoint{}, fmt.Errorf("restore %s: %w", spec.SandboxID, err)
		}
		if err := p.createObjects(ctx, namesFor(spec.SandboxID), shape, spec, snap); err != nil {
			return provider.Endpoint{}, fmt.Errorf("restore %s: %w", spec.SandboxID, err)
		}
	}
	ep, err := p.waitReady(ctx, name, shape.Platform, pinned)
	if err != nil {
		return provider.Endpoint{}, fmt.Errorf("restore %s: %w", spec.SandboxID, err)
	}
	p.log.InfoContext(ctx, "sandbox restored", "sandbox_id", spec.SandboxID, "pod", name)
	return ep, nil
}

var errNoSnapshot = errors.New("no ready volume snapshot")

func (p *Provider) readySnapshot(ctx context.Context, sandboxID string) (string, error) {
	snaps, err := p.snapshots(ctx, sandboxID)
	if err != nil {
		return "", err
	}
	if len(snaps) == 0 {
		// Gone, not just not ready yet: retrying cannot bring it back.
		return "", provider.ErrSnapshotGone
	}
	for _, s := range snaps {
		if ready, _, _ := unstructured.NestedBool(s.Object, "status", "readyToUse"); ready {
			return s.GetName(), nil
		}
	}
	return "", errNoSnapshot
}
