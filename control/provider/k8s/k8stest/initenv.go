package k8stest

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// imageEnv is the sandbox image's environment: the ENV of
// deploy/docker/sandbox.Dockerfile (deploy's
// TestSandboxImageMatchesPodSpec holds the two together) and the base
// image's PATH.
var imageEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"SBX_SSH_PORT=2222", "SBX_FORWARD_PORT=2223", "SBX_SECRET_DIR=/etc/sbx", "SBX_RUN_DIR=/run/sbx", "SBX_WORKSPACE=/workspace", "HOME=/home/sandbox",
}

// pathEnv are the variables cmd/sbx-init reads as paths in the
// container.
var pathEnv = []string{"SBX_SECRET_DIR", "SBX_RUN_DIR", "SBX_WORKSPACE", "HOME"}

// badSpecError is a pod spec the init cannot run under: the pod fails
// rather than waiting for ever, as it would on a real node.
type badSpecError struct{ error }

// InitEnv is the environment the kubelet runs a pod's init with: the
// image's, overridden by the pod's container's, with each path the init
// reads resolved from the container's view to this machine's (under a
// volume mount, into that volume's directory from vols, keyed by volume
// name; elsewhere under root, the container's own filesystem). It
// refuses a pod whose environment does not point the init at what the
// pod mounts for it: the Secret volume at SBX_SECRET_DIR, the workspace
// PVC at SBX_WORKSPACE, the port named ssh at SBX_SSH_PORT, the port
// named forward at SBX_FORWARD_PORT.
func InitEnv(pod *corev1.Pod, root string, vols map[string]string) ([]string, error) {
	c := pod.Spec.Containers[0]
	var names []string
	env := map[string]string{}
	set := func(k, v string) {
		if _, ok := env[k]; !ok {
			names = append(names, k)
		}
		env[k] = v
	}
	for _, kv := range imageEnv {
		k, v, _ := strings.Cut(kv, "=")
		set(k, v)
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			return nil, badSpecError{fmt.Errorf("env %s: the test kubelet takes only values", e.Name)}
		}
		set(e.Name, e.Value)
	}
	mountPath := map[string]string{}
	for _, m := range c.VolumeMounts {
		mountPath[m.Name] = m.MountPath
	}
	for _, v := range pod.Spec.Volumes {
		name := ""
		switch {
		case v.Secret != nil:
			name = "SBX_SECRET_DIR"
		case v.PersistentVolumeClaim != nil:
			name = "SBX_WORKSPACE"
		default:
			continue
		}
		if mp, ok := mountPath[v.Name]; !ok || filepath.Clean(env[name]) != mp {
			return nil, badSpecError{fmt.Errorf("%s is %q, but the pod mounts volume %s at %q: the init would not find it", name, env[name], v.Name, mp)}
		}
	}
	portEnv := map[string]string{"ssh": "SBX_SSH_PORT", "forward": "SBX_FORWARD_PORT"}
	for _, p := range c.Ports {
		if name, ok := portEnv[p.Name]; ok && strconv.Itoa(int(p.ContainerPort)) != env[name] {
			return nil, badSpecError{fmt.Errorf("%s is %q, but the port named %s is %d", name, env[name], p.Name, p.ContainerPort)}
		}
	}
	// Deepest mount first, so a mount inside another wins.
	mounts := slices.Clone(c.VolumeMounts)
	slices.SortFunc(mounts, func(a, b corev1.VolumeMount) int { return len(b.MountPath) - len(a.MountPath) })
	resolve := func(p string) string {
		p = filepath.Clean(p)
		for _, m := range mounts {
			host, ok := vols[m.Name]
			if !ok {
				continue
			}
			if rel, err := filepath.Rel(m.MountPath, p); err == nil && filepath.IsLocal(rel) {
				return filepath.Join(host, rel)
			}
		}
		return filepath.Join(root, p)
	}
	for _, name := range pathEnv {
		if env[name] != "" {
			env[name] = resolve(env[name])
		}
	}
	out := make([]string, len(names))
	for i, k := range names {
		out[i] = k + "=" + env[k]
	}
	return out, nil
}

func lookupEnv(env []string, name string) string {
	for _, kv := range slices.Backward(env) {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v
		}
	}
	return ""
}
