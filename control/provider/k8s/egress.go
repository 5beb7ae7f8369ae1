package k8s

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
)

// EgressSetter is what a provider that enforces the egress mode below
// the proxy offers: control calls it when a PATCH changes a running
// sandbox's network policy. Provision and Restore take the mode from
// provider.Spec.Egress, so a sandbox without a pod needs no call.
type EgressSetter interface {
	SetEgress(ctx context.Context, sandboxID, mode string) error
}

var _ EgressSetter = (*Provider)(nil)

// SetEgress relabels the sandbox's pods with mode (LabelEgress; "" removes
// it), which deploy/'s NetworkPolicy selects on: from the next packet
// the pod of a sandbox patched to allowlist or none reaches only the
// gateway and DNS, and one patched to open reaches out again. The
// gateway applies the new policy itself; this is the floor under it for
// processes that ignore the proxy. A sandbox with no pod (suspended)
// succeeds: its restore labels the new pod from the spec.
func (p *Provider) SetEgress(ctx context.Context, sandboxID, mode string) error {
	if msgs := validation.IsValidLabelValue(mode); len(msgs) > 0 {
		return fmt.Errorf("egress mode %q of %s: %v", mode, sandboxID, msgs)
	}
	var value any = mode
	if mode == "" {
		value = nil // a merge patch's null removes the label
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{LabelEgress: value}}})
	if err != nil {
		return err
	}
	list, err := p.pods().List(ctx, metav1.ListOptions{LabelSelector: selector(LabelSandbox, sandboxID)})
	if err != nil {
		return fmt.Errorf("list pods of %s: %w", sandboxID, err)
	}
	for _, pod := range list.Items {
		if pod.DeletionTimestamp != nil || pod.Labels[LabelEgress] == mode {
			continue
		}
		_, err := p.client.CoreV1().Pods(p.cfg.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, patchOpts)
		if err := ignoreNotFound(err); err != nil {
			return fmt.Errorf("label pod %s of %s egress %q: %w", pod.Name, sandboxID, mode, err)
		}
		p.log.InfoContext(ctx, "egress label changed", "sandbox_id", sandboxID, "pod", pod.Name, "egress", mode)
	}
	return nil
}
