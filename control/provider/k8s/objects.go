package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/internal/initproto"
)

// Labels and annotations on every object the provider creates. The Pod
// Watcher, List and the RBAC-scoped selectors all key on them.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	managedBy      = "sbx-control"
	LabelRole      = "sbx.dev/role" // "sandbox" or "warm"
	LabelSandbox   = "sbx.dev/sandbox-id"
	LabelAccount   = "sbx.dev/account-id"
	LabelProfile   = "sbx.dev/profile"
	LabelPlatform  = "sbx.dev/platform"
	// LabelEgress is the sandbox's egress mode; a pod whose mode is not
	// open may reach only the egress gateway and DNS (deploy/base's
	// sandbox-egress-gateway-only NetworkPolicy).
	LabelEgress  = "sbx.dev/egress"
	AnnotAccount = "sbx.dev/account-id"
	AnnotImage   = "sbx.dev/image"

	RoleSandbox = "sandbox"
	RoleWarm    = "warm"
)

// Paths inside the sandbox. The image's init (cmd/sbx-init, PID 1 of
// deploy/docker/sandbox.Dockerfile) follows this contract: it waits for SecretDir/host_key, installs each
// entry of SecretDir/files.json into the sandbox user's home, then starts
// sshd on the SSH port trusting SecretDir/user_ca.pub, and serves the
// edge's forwarder on the forward port with the same keys for
// SandboxUser. Grant tokens reach the sandbox this way, at the path the
// grants code documents, and so do the spec's Env and Services
// (secretData).
const (
	SecretDir      = "/etc/sbx"
	LinuxWorkspace = "/workspace"
	MacOSWorkspace = "/Users/sandbox/workspace"
	SandboxUser    = "sandbox"
	sandboxUID     = 1000

	keyHostKey   = "host_key"
	keyUserCA    = "user_ca.pub"
	keyFilesJSON = "files.json"
)

// FileEntry is one line of files.json: Secret key, path under the home
// directory and mode.
type FileEntry struct {
	Key  string `json:"key"`
	Path string `json:"path"`
	Mode uint32 `json:"mode"`
}

// names of one sandbox's objects. Cold-booted sandboxes use the sandbox ID;
// a claimed warm pod keeps its own names.
type names struct{ pod, pvc, secret string }

func namesFor(pod string) names {
	return names{pod: pod, pvc: pod + "-ws", secret: pod + "-ssh"}
}

func labelsFor(role string, shape Shape, spec *provider.Spec) map[string]string {
	l := map[string]string{
		LabelManagedBy: managedBy, LabelRole: role,
		LabelProfile: shape.Name, LabelPlatform: shape.Platform,
	}
	if spec != nil {
		l[LabelSandbox] = spec.SandboxID
		if spec.Egress != "" {
			l[LabelEgress] = spec.Egress
		}
		if len(validation.IsValidLabelValue(spec.AccountID)) == 0 {
			l[LabelAccount] = spec.AccountID
		}
	}
	return l
}

func annotationsFor(shape Shape, spec *provider.Spec) map[string]string {
	a := map[string]string{AnnotImage: shape.Image}
	if spec != nil {
		a[AnnotAccount] = spec.AccountID
	}
	return a
}

// secretData is the Secret a sandbox's pod mounts at SecretDir: host key,
// CA public key, the provisioning files with their manifest, the spec's
// Env (initproto.EnvFile), which the init sets in every SSH session and
// service, and the spec's Services (initproto.ServicesFile), which the
// init starts with the pod rather than wait for control's push (control
// still pushes, finding them running: the endpoint does not say
// ServicesStarted). The Env and the Services are here and never in the
// pod's env: they may hold the proxy credential and a create's secrets,
// which must not show in the pod object (kubectl get -o yaml, describe)
// or its events, and a warm pod boots before they are known.
func secretData(spec provider.Spec) (map[string][]byte, error) {
	data := map[string][]byte{
		keyHostKey: spec.HostKeyPEM,
		keyUserCA:  []byte(spec.UserCAKey),
	}
	if len(spec.Env) > 0 {
		env, err := initproto.EncodeEnv(spec.Env)
		if err != nil {
			// Names the variable, never the value.
			return nil, fmt.Errorf("sandbox %s: %w", spec.SandboxID, err)
		}
		data[initproto.EnvFile] = env
	}
	if len(spec.Services) > 0 {
		svcs, err := initproto.EncodeServices(spec.Services)
		if err != nil {
			return nil, fmt.Errorf("sandbox %s: %w", spec.SandboxID, err)
		}
		data[initproto.ServicesFile] = svcs
	}
	entries := make([]FileEntry, 0, len(spec.Files))
	for i, f := range spec.Files {
		key := "file-" + strconv.Itoa(i)
		mode := f.Mode & 0o777
		if mode == 0 {
			mode = 0o600
		}
		entries = append(entries, FileEntry{Key: key, Path: f.Path, Mode: mode})
		data[key] = f.Data
	}
	manifest, err := json.Marshal(entries)
	if err != nil {
		return nil, fmt.Errorf("encode files.json: %w", err)
	}
	data[keyFilesJSON] = manifest
	return data, nil
}

func (p *Provider) secret(n names, role string, shape Shape, spec *provider.Spec) (*corev1.Secret, error) {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: n.secret, Namespace: p.cfg.Namespace,
			Labels: labelsFor(role, shape, spec), Annotations: annotationsFor(shape, spec),
		},
		Type: corev1.SecretTypeOpaque,
	}
	if spec != nil {
		data, err := secretData(*spec)
		if err != nil {
			return nil, err
		}
		s.Data = data
	}
	return s, nil
}

func (p *Provider) pvc(n names, role string, shape Shape, spec *provider.Spec, fromSnapshot string) *corev1.PersistentVolumeClaim {
	pool := p.cfg.Catalog.Pools[shape.Platform]
	c := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: n.pvc, Namespace: p.cfg.Namespace,
			Labels: labelsFor(role, shape, spec), Annotations: annotationsFor(shape, spec),
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(strconv.Itoa(shape.DiskGB) + "Gi")},
			},
		},
	}
	if pool.StorageClassName != "" {
		c.Spec.StorageClassName = ptr.To(pool.StorageClassName)
	}
	if fromSnapshot != "" {
		c.Spec.DataSource = &corev1.TypedLocalObjectReference{
			APIGroup: ptr.To(snapshotGroup), Kind: "VolumeSnapshot", Name: fromSnapshot,
		}
	}
	return c
}

// pod builds the sandbox pod. Every pod runs non-root with every
// capability dropped, no privilege escalation and the runtime's seccomp
// profile: the sandbox namespace enforces the restricted Pod Security
// Standard. macOS pods are VMs booted by the pool's runtime, where the
// securityContext constrains little, but admission judges the spec, not
// the runtime, and refuses a pod without it. Their workspace lives on the
// VM disk (no PVC, no suspend in v1).
func (p *Provider) pod(n names, role string, shape Shape, spec *provider.Spec) *corev1.Pod {
	pool := p.cfg.Catalog.Pools[shape.Platform]
	cpu := resource.MustParse(strconv.FormatFloat(shape.CPU, 'f', -1, 64))
	mem := resource.MustParse(strconv.Itoa(shape.MemoryMB) + "Mi")
	res := corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem}
	c := corev1.Container{
		Name: "sandbox",
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			Privileged:               ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
		Image:           shape.Image,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Ports: []corev1.ContainerPort{
			{Name: "ssh", ContainerPort: int32(p.cfg.SSHPort), Protocol: corev1.ProtocolTCP},
			{Name: "forward", ContainerPort: int32(p.cfg.ForwardPort), Protocol: corev1.ProtocolTCP},
		},
		Env: []corev1.EnvVar{
			{Name: "SBX_SSH_PORT", Value: strconv.Itoa(p.cfg.SSHPort)},
			{Name: "SBX_FORWARD_PORT", Value: strconv.Itoa(p.cfg.ForwardPort)},
			// The principal the edge's certificates carry (Endpoint.User).
			{Name: "SBX_USER", Value: SandboxUser},
			{Name: "SBX_SECRET_DIR", Value: SecretDir},
		},
		Resources:    corev1.ResourceRequirements{Requests: res, Limits: res.DeepCopy()},
		VolumeMounts: []corev1.VolumeMount{{Name: "ssh", MountPath: SecretDir, ReadOnly: true}},
		// sshd answering is readiness; control checks the host key itself.
		ReadinessProbe: &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("ssh")}},
			PeriodSeconds: 2,
		},
	}
	podSpec := corev1.PodSpec{
		Containers:                    []corev1.Container{c},
		RestartPolicy:                 corev1.RestartPolicyNever,
		NodeSelector:                  pool.NodeSelector,
		Tolerations:                   pool.Tolerations,
		AutomountServiceAccountToken:  ptr.To(false),
		EnableServiceLinks:            ptr.To(false),
		TerminationGracePeriodSeconds: ptr.To[int64](10),
		SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](sandboxUID), RunAsGroup: ptr.To[int64](sandboxUID),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Volumes: []corev1.Volume{{
			Name: "ssh",
			VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: n.secret, DefaultMode: ptr.To[int32](0o440),
			}},
		}},
	}
	if pool.RuntimeClassName != "" {
		podSpec.RuntimeClassName = ptr.To(pool.RuntimeClassName)
	}
	// The init runs the services in the workspace; the image's default
	// is /workspace, and the pod says where it mounted it.
	ws := workspaceFor(shape.Platform)
	switch shape.Platform {
	case PlatformLinux:
		ws = p.workspaceDir(n.pod)
		podSpec.Volumes = append(podSpec.Volumes, corev1.Volume{
			Name:         "workspace",
			VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: n.pvc}},
		})
		podSpec.Containers[0].VolumeMounts = append(podSpec.Containers[0].VolumeMounts,
			corev1.VolumeMount{Name: "workspace", MountPath: ws})
		// The workspace volume is owned by the sandbox user.
		podSpec.SecurityContext.FSGroup = ptr.To[int64](sandboxUID)
	case PlatformMacOS:
		// The VM disk holds the workspace; size it with the shape's disk.
		disk := resource.MustParse(strconv.Itoa(shape.DiskGB) + "Gi")
		podSpec.Containers[0].Resources.Requests[corev1.ResourceEphemeralStorage] = disk
		podSpec.Containers[0].Resources.Limits[corev1.ResourceEphemeralStorage] = disk
	}
	podSpec.Containers[0].Env = append(podSpec.Containers[0].Env, corev1.EnvVar{Name: "SBX_WORKSPACE", Value: ws})
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: n.pod, Namespace: p.cfg.Namespace,
			Labels: labelsFor(role, shape, spec), Annotations: annotationsFor(shape, spec),
		},
		Spec: podSpec,
	}
}

func expandPod(s, pod string) string { return strings.ReplaceAll(s, "%s", pod) }

func workspaceFor(platform string) string {
	if platform == PlatformMacOS {
		return MacOSWorkspace
	}
	return LinuxWorkspace
}

// replaceSecret makes the Secret named want.Name hold want's data, labels
// and annotations. It updates from a fresh read with its resourceVersion,
// so a concurrent writer (another replica re-provisioning, an operator's
// edit) is not silently overwritten: on 409 Conflict it reads and tries
// again. Fields others own (other labels, finalizers) are kept.
func (p *Provider) replaceSecret(ctx context.Context, want *corev1.Secret) error {
	secrets := p.client.CoreV1().Secrets(p.cfg.Namespace)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := secrets.Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		next := cur.DeepCopy()
		next.Data, next.StringData, next.Type = want.Data, nil, want.Type
		if next.Labels == nil {
			next.Labels = map[string]string{}
		}
		maps.Copy(next.Labels, want.Labels)
		if next.Annotations == nil {
			next.Annotations = map[string]string{}
		}
		maps.Copy(next.Annotations, want.Annotations)
		_, err = secrets.Update(ctx, next, metav1.UpdateOptions{FieldValidation: metav1.FieldValidationStrict})
		return err
	})
}

// Every object is written with strict server-side field validation: a
// field the apiserver does not know (a typo, a field of a newer API) is
// an error, not silently dropped.
var (
	createOpts = metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}
	patchOpts  = metav1.PatchOptions{FieldValidation: metav1.FieldValidationStrict}
)
