package k8s

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sbxedge/sbx/control/provider"
)

// Users' snapshots (provider.Snapshotter) are VolumeSnapshots of the
// workspace PVC, named by the snapshot's ID. They carry LabelSnapshotOf,
// never LabelSandbox: everything keyed on a sandbox's label (its suspend
// snapshots, Destroy, Status, List) leaves them alone, so they outlive
// the sandbox.
const (
	LabelSnapshotOf = "sbx.dev/snapshot-of"
	RoleSnapshot    = "snapshot"
)

// Snapshot takes a VolumeSnapshot of the sandbox's workspace PVC while
// its pod keeps running, and waits until it is ready to use.
func (p *Provider) Snapshot(ctx context.Context, sandboxID, snapshotID string) error {
	pod, err := p.podFor(ctx, sandboxID)
	if err != nil {
		return err
	}
	if pod == nil || terminal(pod) {
		return fmt.Errorf("snapshot %s: no running pod: %w", sandboxID, provider.ErrNotFound)
	}
	pvc := workspaceClaim(pod)
	if pvc == "" || pod.Labels[LabelPlatform] != PlatformLinux {
		return fmt.Errorf("snapshot %s (%s): no workspace volume to snapshot: %w", sandboxID, pod.Labels[LabelPlatform], provider.ErrSuspendUnsupported)
	}
	spec := map[string]any{"source": map[string]any{"persistentVolumeClaimName": pvc}}
	if c := p.cfg.Catalog.Pools[PlatformLinux].VolumeSnapshotClassName; c != "" {
		spec["volumeSnapshotClassName"] = c
	}
	lbls := map[string]any{LabelManagedBy: managedBy, LabelRole: RoleSnapshot, LabelSnapshotOf: sandboxID}
	for _, k := range []string{LabelAccount, LabelProfile, LabelPlatform} {
		if v, ok := pod.Labels[k]; ok {
			lbls[k] = v
		}
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": snapshotGroup + "/v1",
		"kind":       "VolumeSnapshot",
		"metadata": map[string]any{
			"name": snapshotID, "namespace": p.cfg.Namespace, "labels": lbls,
			"annotations": map[string]any{annotCreatedAt: time.Now().UTC().Format(time.RFC3339Nano)},
		},
		"spec": spec,
	}}
	_, err = p.dyn.Resource(SnapshotGVR).Namespace(p.cfg.Namespace).Create(ctx, obj, createOpts)
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("snapshot %s: create volume snapshot %s: %w", sandboxID, snapshotID, err)
	}
	if err := p.waitSnapshot(ctx, snapshotID); err != nil {
		return fmt.Errorf("snapshot %s: %w", sandboxID, err)
	}
	p.log.InfoContext(ctx, "sandbox snapshot taken", "sandbox_id", sandboxID, "snapshot_id", snapshotID)
	return nil
}

// DeleteSnapshot deletes the VolumeSnapshot; one already gone is fine.
func (p *Provider) DeleteSnapshot(ctx context.Context, snapshotID string) error {
	err := p.dyn.Resource(SnapshotGVR).Namespace(p.cfg.Namespace).Delete(ctx, snapshotID, metav1.DeleteOptions{})
	if ignoreNotFound(err) != nil {
		return fmt.Errorf("delete volume snapshot %s: %w", snapshotID, err)
	}
	return nil
}

// userSnapshot checks that the snapshot a fork or restore names exists:
// one that is gone cannot come back, however often it is retried.
func (p *Provider) userSnapshot(ctx context.Context, snapshotID string) error {
	_, err := p.dyn.Resource(SnapshotGVR).Namespace(p.cfg.Namespace).Get(ctx, snapshotID, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("volume snapshot %s: %w", snapshotID, provider.ErrSnapshotGone)
	}
	if err != nil {
		return fmt.Errorf("get volume snapshot %s: %w", snapshotID, err)
	}
	return nil
}

// restoreInPlace replaces the sandbox's pod and workspace PVC with new
// ones, the PVC's data source the snapshot. It starts over on every call
// (a retry included): the restore is to the snapshot as it is, whatever
// an earlier attempt left.
func (p *Provider) restoreInPlace(ctx context.Context, spec provider.Spec) (provider.Endpoint, error) {
	if err := p.userSnapshot(ctx, spec.FromSnapshot); err != nil {
		return provider.Endpoint{}, fmt.Errorf("restore %s: %w", spec.SandboxID, err)
	}
	shape, pinned, _, err := p.current(ctx, spec)
	if err != nil {
		return provider.Endpoint{}, err
	}
	if err := p.deleteSandboxObjects(ctx, spec.SandboxID, false); err != nil {
		return provider.Endpoint{}, fmt.Errorf("restore %s: drop pod and workspace: %w", spec.SandboxID, err)
	}
	if err := p.waitPodsGone(ctx, spec.SandboxID); err != nil {
		return provider.Endpoint{}, fmt.Errorf("restore %s: %w", spec.SandboxID, err)
	}
	if err := p.createObjects(ctx, namesFor(spec.SandboxID), shape, spec, spec.FromSnapshot); err != nil {
		return provider.Endpoint{}, fmt.Errorf("restore %s: %w", spec.SandboxID, err)
	}
	ep, err := p.waitReady(ctx, spec.SandboxID, shape.Platform, pinned)
	if err != nil {
		return provider.Endpoint{}, fmt.Errorf("restore %s: %w", spec.SandboxID, err)
	}
	p.log.InfoContext(ctx, "sandbox restored to a snapshot", "sandbox_id", spec.SandboxID, "snapshot_id", spec.FromSnapshot)
	return ep, nil
}

// waitPodsGone waits until the sandbox's deleted pods are gone from the
// API, so the new pod of the same name is not refused as existing.
func (p *Provider) waitPodsGone(ctx context.Context, sandboxID string) error {
	for {
		list, err := p.pods().List(ctx, metav1.ListOptions{LabelSelector: selector(LabelSandbox, sandboxID)})
		if err != nil {
			return fmt.Errorf("list pods of %s: %w", sandboxID, err)
		}
		if len(list.Items) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pods of %s still there: %w", sandboxID, context.Cause(ctx))
		case <-time.After(p.cfg.PollInterval):
		}
	}
}
