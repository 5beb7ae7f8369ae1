package k8s_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/sbxedge/sbx/control/provider/k8s/k8stest"
)

// goldenPod is the pod of testdata/<platform>.golden.yaml, which
// TestObjectsGolden pins to what the provider builds.
func goldenPod(t *testing.T, platform string) *corev1.Pod {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", platform+".golden.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(b), "\n---\n")
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict([]byte(strings.TrimPrefix(docs[0], "---\n")), &pod); err != nil {
		t.Fatal(err)
	}
	return &pod
}

// TestGoldenPodRunsTheInit: the pod in the golden file points the init
// (cmd/sbx-init, which the test kubelet runs with the environment
// k8stest.InitEnv derives from the pod spec) at its Secret volume, its
// workspace PVC, its SSH port and its forwarder's port; a pod that mounts
// the workspace somewhere the init does not look is refused. Every pod in this
// package's tests runs through the same derivation, so a pod spec the
// init cannot run under fails them too.
func TestGoldenPodRunsTheInit(t *testing.T) {
	pod := goldenPod(t, "linux")
	env, err := k8stest.InitEnv(pod, "/pod/root", map[string]string{"ssh": "/vol/secret", "workspace": "/vol/ws"})
	if err != nil {
		t.Fatalf("the golden pod's init environment: %v", err)
	}
	for _, want := range []string{
		"SBX_SECRET_DIR=/vol/secret", "SBX_WORKSPACE=/vol/ws", "SBX_SSH_PORT=2222", "SBX_FORWARD_PORT=2223", "SBX_USER=sandbox",
		// The image's own, in the container's filesystem.
		"SBX_RUN_DIR=/pod/root/run/sbx", "HOME=/pod/root/home/sandbox",
	} {
		if !slices.Contains(env, want) {
			t.Errorf("init environment %q lacks %s", env, want)
		}
	}

	moved := pod.DeepCopy()
	for i, m := range moved.Spec.Containers[0].VolumeMounts {
		if m.Name == "workspace" {
			moved.Spec.Containers[0].VolumeMounts[i].MountPath = "/home/sandbox/ws"
		}
	}
	if env, err := k8stest.InitEnv(moved, "/pod/root", map[string]string{"ssh": "/vol/secret", "workspace": "/vol/ws"}); err == nil {
		t.Errorf("a pod mounting its workspace away from SBX_WORKSPACE ran with %q; want it refused", env)
	}
	noPort := pod.DeepCopy()
	noPort.Spec.Containers[0].Env = slices.DeleteFunc(noPort.Spec.Containers[0].Env, func(e corev1.EnvVar) bool { return e.Name == "SBX_SSH_PORT" })
	noPort.Spec.Containers[0].Ports[0].ContainerPort = 2200
	if env, err := k8stest.InitEnv(noPort, "/pod/root", nil); err == nil {
		t.Errorf("a pod whose ssh port is not the init's ran with %q; want it refused", env)
	}
	noFwd := pod.DeepCopy()
	noFwd.Spec.Containers[0].Env = slices.DeleteFunc(noFwd.Spec.Containers[0].Env, func(e corev1.EnvVar) bool { return e.Name == "SBX_FORWARD_PORT" })
	noFwd.Spec.Containers[0].Ports[1].ContainerPort = 2300
	if env, err := k8stest.InitEnv(noFwd, "/pod/root", nil); err == nil {
		t.Errorf("a pod whose forward port is not the init's ran with %q; want it refused", env)
	}

	mac, err := k8stest.InitEnv(goldenPod(t, "macos"), "/pod/root", map[string]string{"ssh": "/vol/secret"})
	if err != nil {
		t.Fatalf("the golden macOS pod's init environment: %v", err)
	}
	if !slices.Contains(mac, "SBX_WORKSPACE=/pod/root/Users/sandbox/workspace") {
		t.Errorf("macOS init environment %q: want the workspace on the VM's disk", mac)
	}
}
