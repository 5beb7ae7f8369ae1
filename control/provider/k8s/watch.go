package k8s

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/sbxedge/sbx/control/provider"
)

// Stop reasons read from a pod.
const (
	ReasonOOMKilled  = "oom_killed"
	ReasonNodeLoss   = "node_loss"
	ReasonEvicted    = "evicted"
	ReasonGuestCrash = "guest_crash"
	ReasonError      = "error"
)

func terminal(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded
}

// StopReason reads why a pod ended. The sandbox's init never exits on its
// own, so a container that exited (whatever its code) is the guest
// crashing; the kubelet's and node controller's reasons come first.
func StopReason(pod *corev1.Pod) string {
	switch pod.Status.Reason {
	case "Evicted":
		return ReasonEvicted
	case "NodeLost", "NodeShutdown", "Terminated", "Shutdown":
		return ReasonNodeLoss
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			switch c.Reason {
			case "DeletionByTaintManager", "TerminationByKubelet":
				return ReasonNodeLoss
			case "EvictionByEvictionAPI", "PreemptionByScheduler":
				return ReasonEvicted
			}
		}
	}
	crashed := false
	for _, cs := range pod.Status.ContainerStatuses {
		t := cs.State.Terminated
		if t == nil {
			continue
		}
		if t.Reason == "OOMKilled" {
			return ReasonOOMKilled
		}
		crashed = true
	}
	if crashed || pod.Status.Phase == corev1.PodSucceeded {
		return ReasonGuestCrash
	}
	return ReasonError
}

// FinishedAt is when the pod ended: the latest container finish time, else
// the time its disruption or readiness condition last changed. Zero when
// the pod tells nothing; callers use their clock then.
func FinishedAt(pod *corev1.Pod) time.Time {
	var at time.Time
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil && t.FinishedAt.After(at) {
			at = t.FinishedAt.Time
		}
	}
	if !at.IsZero() {
		return at.UTC()
	}
	for _, c := range pod.Status.Conditions {
		if (c.Type == corev1.DisruptionTarget || c.Type == corev1.PodReady) && c.LastTransitionTime.After(at) {
			at = c.LastTransitionTime.Time
		}
	}
	return at.UTC()
}

// OnStop registers fn for pod stops; see provider.StopWatcher. Register
// before Start so no stop is missed.
func (p *Provider) OnStop(fn func(provider.Stop)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stops = append(p.stops, fn)
}

func (p *Provider) emit(s provider.Stop) {
	p.mu.Lock()
	fns := append([]func(provider.Stop){}, p.stops...)
	p.mu.Unlock()
	for _, fn := range fns {
		fn(s)
	}
}

// Start runs the Pod Watcher (a shared informer on the namespace's sandbox
// pods) and, with a warm store, the warm pool replenisher. It returns once
// the informer's cache has synced. Close stops both.
func (p *Provider) Start(ctx context.Context) error {
	p.mu.Lock()
	if p.started {
		p.mu.Unlock()
		return errors.New("k8s provider: already started")
	}
	p.started = true
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p.cancel = cancel
	p.mu.Unlock()

	factory := informers.NewSharedInformerFactoryWithOptions(p.client, 0,
		informers.WithNamespace(p.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector() }))
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { p.observe(obj, false) },
		UpdateFunc: func(_, obj any) { p.observe(obj, false) },
		DeleteFunc: func(obj any) { p.observe(obj, true) },
	}); err != nil {
		cancel()
		return fmt.Errorf("k8s provider: watch pods: %w", err)
	}
	factory.Start(runCtx.Done())
	p.wg.Go(func() {
		<-runCtx.Done()
		factory.Shutdown()
	})
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		p.Close()
		return fmt.Errorf("k8s provider: pod cache did not sync: %w", context.Cause(ctx))
	}
	lister := factory.Core().V1().Pods().Lister()
	p.wg.Go(func() { p.gauges(runCtx, lister) })
	if p.warm != nil {
		p.wg.Go(func() { p.replenishLoop(runCtx) })
	}
	return nil
}

// observe turns a pod event into a Stop. A sandbox pod deleted before it
// reached a terminal phase went with its node (the node controller deletes
// pods of lost nodes); control's own deletions happen while the sandbox is
// suspending or terminating, which lifecycle ignores.
func (p *Provider) observe(obj any, deleted bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Labels[LabelRole] != RoleSandbox || pod.Labels[LabelSandbox] == "" {
		return
	}
	if !terminal(pod) && !deleted {
		return
	}
	// Report each pod once per process: status updates of an ended pod
	// and its later deletion are the same stop.
	key := pod.Name
	p.mu.Lock()
	dup := p.reported[key]
	if deleted {
		delete(p.reported, key)
	} else {
		p.reported[key] = true
	}
	p.mu.Unlock()
	if dup {
		return
	}
	s := provider.Stop{SandboxID: pod.Labels[LabelSandbox]}
	switch {
	case terminal(pod):
		s.Reason, s.At = StopReason(pod), FinishedAt(pod)
	default:
		s.Reason, s.At = ReasonNodeLoss, time.Now().UTC()
	}
	if s.At.IsZero() {
		s.At = time.Now().UTC()
	}
	p.log.Info("sandbox pod stopped", "sandbox_id", s.SandboxID, "pod", pod.Name, "reason", s.Reason, "at", s.At)
	p.metrics.stops.WithLabelValues(s.Reason).Inc()
	p.emit(s)
}

// Close stops the watcher and the replenisher and waits for them.
func (p *Provider) Close() error {
	p.mu.Lock()
	cancel := p.cancel
	p.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	p.wg.Wait()
	return nil
}
