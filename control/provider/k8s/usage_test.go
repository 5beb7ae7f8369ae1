package k8s

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestUsageSplitsClaimedAndQueued: live sandbox pods count as claimed once
// the scheduler placed them and as queued until then; warm pods hold a
// slot but are no demand; ended pods count for nothing. The capacity
// alert's recording rules (deploy/base/prometheusrule.yaml) read these.
func TestUsageSplitsClaimedAndQueued(t *testing.T) {
	p, _ := objectBuilder(t)
	pod := func(platform, role string, mut func(*corev1.Pod)) *corev1.Pod {
		po := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{LabelPlatform: platform, LabelRole: role}}}
		if mut != nil {
			mut(po)
		}
		return po
	}
	onNode := func(po *corev1.Pod) { po.Spec.NodeName = "mac-1" }
	scheduled := func(po *corev1.Pod) {
		po.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
	}
	unschedulable := func(po *corev1.Pod) {
		po.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
	}
	ended := func(po *corev1.Pod) { po.Spec.NodeName = "mac-1"; po.Status.Phase = corev1.PodFailed }
	pods := []*corev1.Pod{
		pod(PlatformMacOS, RoleSandbox, onNode),
		pod(PlatformMacOS, RoleSandbox, scheduled),
		pod(PlatformMacOS, RoleSandbox, unschedulable),
		pod(PlatformMacOS, RoleSandbox, nil), // just created: not yet seen by the scheduler
		pod(PlatformMacOS, RoleSandbox, ended),
		pod(PlatformLinux, RoleWarm, onNode),
		pod(PlatformLinux, RoleSandbox, onNode),
	}
	got := p.usage(pods)
	want := map[string]poolUsage{
		PlatformMacOS: {Capacity: 8, Desired: 4, Available: 4, Unschedulable: 1, Claimed: 2, Queued: 2, WarmFloor: 0, PerHost: 2},
		PlatformLinux: {Capacity: 40, Desired: 1 + 2, Available: 38, Claimed: 1, WarmFloor: 2, PerHost: 40},
	}
	for pool, w := range want {
		if got[pool] != w {
			t.Errorf("%s: usage %+v, want %+v", pool, got[pool], w)
		}
	}
}

// TestHostSlots: a pool's per-host slots default by platform, and a macOS
// pool may not claim more VMs per host than Apple's licence allows.
func TestHostSlots(t *testing.T) {
	for _, tc := range []struct {
		platform string
		pool     Pool
		want     int
	}{
		{PlatformMacOS, Pool{Slots: 8}, 2},
		{PlatformMacOS, Pool{Slots: 8, SlotsPerHost: 1}, 1},
		{PlatformLinux, Pool{Slots: 40}, 40},
		{PlatformLinux, Pool{Slots: 40, SlotsPerHost: 8}, 8},
		{PlatformLinux, Pool{}, 1},
	} {
		if got := tc.pool.HostSlots(tc.platform); got != tc.want {
			t.Errorf("%s %+v: HostSlots %d, want %d", tc.platform, tc.pool, got, tc.want)
		}
	}
	c := Catalog{
		Pools:    map[string]Pool{PlatformMacOS: {Slots: 8, SlotsPerHost: 3}},
		Profiles: []Shape{{Name: "mac", Platform: PlatformMacOS, CPU: 1, MemoryMB: 1, DiskGB: 1, Image: "i"}},
	}
	if err := c.Validate(); err == nil {
		t.Error("a macOS pool with 3 slots per host validated")
	}
}
