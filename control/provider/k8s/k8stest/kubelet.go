// Package k8stest is a test kubelet for the k8s provider, and a test's
// own namespace on a real kube-apiserver (internal/testkit/kubetest) with control's
// Role from deploy/ applied (NewCluster). The kubelet watches the
// namespace's pods through the API and runs each as a node would run the
// sandbox image: the real init (cmd/sbx-init, built once per test binary)
// as PID 1 of a PID and mount namespace of the pod's own, with the pod's
// Secret written where its volume mounts (rewritten, as kubelet does, when
// the Secret changes), the PVC's directory as the workspace, the
// environment the image and the pod's container set, and sshd and the
// init's forwarder on the pod's own loopback IP and their ports. It
// reports the pod Running with that IP, and Failed or Succeeded when its init exits. It plays the CSI
// driver too: VolumeSnapshots copy the PVC's directory and become
// readyToUse, and a PVC with a snapshot data source starts as that copy.
// Fail ends a pod with a terminal phase and reason on demand.
package k8stest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/sbxedge/sbx/control/provider/k8s"
	"github.com/sbxedge/sbx/internal/sandboxinit/inittest"
	"github.com/sbxedge/sbx/internal/testkit/kubetest"
)

// Kubelet runs pods of one namespace. Close stops every pod.
type Kubelet struct {
	client kubernetes.Interface
	dyn    dynamic.Interface
	ns     string
	dir    string
	// podsDir holds each pod's own files (root, Secret volume, passwd,
	// log) under a short path: the init's control socket is under it,
	// and a unix socket's path has at most 107 bytes.
	podsDir string
	init    string // the sbx-init binary
	port    int    // every pod's SSH port
	fwdPort int    // every pod's forwarder port
	log     *slog.Logger

	mu      sync.Mutex // guards pods, nextIP, nextDir, deleted and each podRun
	pods    map[string]*podRun
	nextIP  uint32
	nextDir int
	// deleted holds pods the watch saw deleted (name -> UID), for the
	// sync loop to stop. Every start and stop of a pod is decided on the
	// sync goroutine, so a deleted pod and its same-named successor
	// (restore after suspend) are never confused.
	deleted map[string]types.UID

	cancel context.CancelFunc
	loops  sync.WaitGroup // the watches and the sync loop
	procs  sync.WaitGroup // each init's waiter and terminator
}

type podRun struct {
	ip    string
	uid   types.UID
	dir   string // the pod's own files: root, secret, passwd, init.log
	grace time.Duration
	// secretRV and gen are the Secret version written to its volume and
	// that write's generation (the ..data swap's directory).
	secretRV string
	gen      int
	proc     *initProc // nil until the init starts
	stopping bool      // the kubelet ends it: no terminal phase to report
	reported bool      // its terminal phase is in the API
}

// initProc is a pod's init, PID 1 of its namespaces.
type initProc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once reaped; code is set by then
	code int
}

func (p *initProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// terminate is a pod's deletion: SIGTERM to PID 1, SIGKILL after grace,
// which ends every process in the pod's PID namespace.
func (p *initProc) terminate(grace time.Duration) {
	if grace > 0 {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
			return
		case <-time.After(grace):
		}
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

var initBin struct {
	once sync.Once
	path string
	err  error
}

// initBinary builds cmd/sbx-init once per test binary.
func initBinary() (string, error) {
	initBin.once.Do(func() {
		dir, err := kubetest.ScratchDir()
		if err != nil {
			initBin.err = err
			return
		}
		initBin.path, initBin.err = inittest.BuildTo(dir)
	})
	return initBin.path, initBin.err
}

// Start runs a kubelet for namespace ns until the test ends, acting
// through client and dyn (cluster-admin clients: a kubelet is not under
// control's Role). It needs root (it makes namespaces and mounts), sshd
// and the package's TestMain to use kubetest.WithCluster.
func Start(t testing.TB, client kubernetes.Interface, dyn dynamic.Interface, ns string) *Kubelet {
	t.Helper()
	if os.Geteuid() != 0 {
		const why = "the test kubelet runs each pod in namespaces of its own, which needs root"
		if kubetest.Required() {
			t.Fatal(why + " (" + kubetest.EnvRequired + "=1: the Kubernetes tests must run)")
		}
		t.Skip(why)
	}
	if _, err := os.Stat(sshdPath); err != nil {
		t.Fatalf("the test kubelet's pods run sshd (apt-get install openssh-server): %v", err)
	}
	bin, err := initBinary()
	if err != nil {
		t.Fatal(err)
	}
	// sshd's privilege separation directory; Debian makes it at boot.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatal(err)
	}
	podsDir, err := os.MkdirTemp("", "kl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(podsDir) }) // after Close: cleanups run last first
	var ports [2]int
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close() // both held until both are picked, so they differ
		ports[i] = ln.Addr().(*net.TCPAddr).Port
	}
	ctx, cancel := context.WithCancel(context.Background())
	k := &Kubelet{
		client: client, dyn: dyn, ns: ns, dir: t.TempDir(), podsDir: podsDir, init: bin, port: ports[0], fwdPort: ports[1],
		log:  slog.New(slog.DiscardHandler),
		pods: map[string]*podRun{}, deleted: map[string]types.UID{},
		// Each kubelet hands out its own block of 127/8 so parallel tests
		// binding the same port never collide.
		nextIP: 127<<24 | uint32(rand.IntN(200)+20)<<16 | uint32(rand.IntN(250))<<8 | 1,
		cancel: cancel,
	}
	watches := []func(context.Context) (watch.Interface, error){
		func(ctx context.Context) (watch.Interface, error) {
			return client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
		},
		func(ctx context.Context) (watch.Interface, error) {
			return client.CoreV1().Secrets(ns).Watch(ctx, metav1.ListOptions{})
		},
		func(ctx context.Context) (watch.Interface, error) {
			return dyn.Resource(k8s.SnapshotGVR).Namespace(ns).Watch(ctx, metav1.ListOptions{})
		},
	}
	kick := make(chan struct{}, 1)
	for _, w := range watches {
		wi, err := w(ctx)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		k.loops.Go(func() {
			defer wi.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case ev, ok := <-wi.ResultChan():
					if !ok {
						return
					}
					if pod, isPod := ev.Object.(*corev1.Pod); isPod && ev.Type == watch.Deleted {
						k.mu.Lock()
						k.deleted[pod.Name] = pod.UID
						k.mu.Unlock()
					}
					select {
					case kick <- struct{}{}:
					default:
					}
				}
			}
		})
	}
	k.loops.Go(func() {
		tick := time.NewTicker(200 * time.Millisecond) // catches events coalesced away
		defer tick.Stop()
		for {
			if err := k.sync(ctx); err != nil && ctx.Err() == nil {
				k.log.Warn("kubelet sync", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-kick:
			case <-tick.C:
			}
		}
	})
	t.Cleanup(k.Close)
	return k
}

const sshdPath = "/usr/sbin/sshd"

// SSHPort is the port every pod's sshd answers on; give it to the
// provider's Config.SSHPort.
func (k *Kubelet) SSHPort() int { return k.port }

// ForwardPort is the port every pod's forwarder answers on; give it to
// the provider's Config.ForwardPort.
func (k *Kubelet) ForwardPort() int { return k.fwdPort }

// WorkspaceDir is the provider's Config.WorkspaceDir for this kubelet:
// every pod's workspace on this machine's filesystem.
func (k *Kubelet) WorkspaceDir() string { return filepath.Join(k.dir, "pods", "%s", "workspace") }

// Close stops the watch loop and every pod.
func (k *Kubelet) Close() {
	k.cancel()
	k.loops.Wait()
	k.mu.Lock()
	pods := k.pods
	k.pods = map[string]*podRun{}
	for _, r := range pods {
		r.stopping = true
	}
	k.mu.Unlock()
	for _, r := range pods {
		if r.proc != nil {
			k.procs.Go(func() { r.proc.terminate(r.grace) })
		}
	}
	k.procs.Wait()
}

// sync converges once: snapshots, new pods, changed Secrets, ended
// inits, deleted pods.
func (k *Kubelet) sync(ctx context.Context) error {
	k.stopDeleted()
	var errs []error
	if err := k.syncSnapshots(ctx); err != nil {
		errs = append(errs, err)
	}
	list, err := k.client.CoreV1().Pods(k.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	if err := k.releaseClaims(ctx, list.Items); err != nil {
		errs = append(errs, err)
	}
	secrets, err := k.client.CoreV1().Secrets(k.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	byName := map[string]*corev1.Secret{}
	for i := range secrets.Items {
		byName[secrets.Items[i].Name] = &secrets.Items[i]
	}
	live := map[string]bool{}
	for i := range list.Items {
		pod := &list.Items[i]
		live[pod.Name] = true
		if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
			continue
		}
		if err := k.run(ctx, pod, byName[secretName(pod)]); err != nil {
			errs = append(errs, fmt.Errorf("pod %s: %w", pod.Name, err))
		}
	}
	k.mu.Lock()
	var gone []string
	for name := range k.pods {
		if !live[name] {
			gone = append(gone, name)
		}
	}
	k.mu.Unlock()
	for _, name := range gone {
		k.stop(name, true)
	}
	return errors.Join(errs...)
}

func secretName(pod *corev1.Pod) string {
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil {
			return v.Secret.SecretName
		}
	}
	return ""
}

// run starts the pod's init if it is not running yet, brings the
// Secret's changes to its volume, and reports the pod's phase.
func (k *Kubelet) run(ctx context.Context, pod *corev1.Pod, sec *corev1.Secret) error {
	k.mu.Lock()
	r := k.pods[pod.Name]
	if r != nil && r.uid != pod.UID {
		// A new pod under an old name whose deletion this kubelet did
		// not see in time.
		k.mu.Unlock()
		k.stop(pod.Name, true)
		k.mu.Lock()
		r = nil
	}
	if r == nil {
		grace := 30 * time.Second
		if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
			grace = time.Duration(*g) * time.Second
		}
		k.nextDir++
		r = &podRun{ip: k.allocIPLocked(), uid: pod.UID, grace: grace,
			dir: filepath.Join(k.podsDir, strconv.Itoa(k.nextDir))}
		k.pods[pod.Name] = r
	}
	proc, reported, stopping := r.proc, r.reported, r.stopping
	k.mu.Unlock()
	if sec == nil || stopping {
		return nil // the Secret volume cannot mount yet: the container waits
	}
	switch {
	case proc == nil:
		if err := k.start(ctx, pod, r, sec); err != nil {
			var bad badSpecError
			if errors.As(err, &bad) {
				return k.report(ctx, pod, Termination{ContainerReason: "CreateContainerConfigError", FinishedAt: time.Now()}, err.Error())
			}
			return err
		}
	case proc.exited():
		if reported {
			return nil
		}
		return k.reportExit(ctx, pod, r)
	case sec.ResourceVersion != r.secretRV:
		if err := k.writeSecret(r, sec); err != nil {
			return err
		}
	}
	if pod.Status.Phase == corev1.PodRunning && pod.Status.PodIP == r.ip {
		return nil
	}
	// The container runs from here on; a warm pod's init waits inside it
	// for its host key.
	now := metav1.Now()
	pod = pod.DeepCopy()
	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIP = r.ip
	pod.Status.PodIPs = []corev1.PodIP{{IP: r.ip}}
	pod.Status.StartTime = &now
	pod.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
	}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: "sandbox", Ready: true, Image: pod.Spec.Containers[0].Image,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
	}}
	_, err := k.client.CoreV1().Pods(k.ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	return ignoreGone(err)
}

// reportExit reports the phase of a pod whose init ended on its own:
// restartPolicy Never leaves it there.
func (k *Kubelet) reportExit(ctx context.Context, pod *corev1.Pod, r *podRun) error {
	code := r.proc.code
	t := Termination{ContainerReason: "Completed", ExitCode: int32(code), FinishedAt: time.Now()}
	msg := ""
	if code != 0 {
		// As kubelet's FallbackToLogsOnError: the log's end says why.
		t.ContainerReason = "Error"
		b, _ := os.ReadFile(filepath.Join(r.dir, "init.log"))
		msg = string(b[max(0, len(b)-2048):])
	}
	if err := k.report(ctx, pod, t, msg); err != nil {
		return err
	}
	k.mu.Lock()
	r.reported = true
	k.mu.Unlock()
	return nil
}

// start runs the pod's init: its volumes in place, its Secret written,
// sshd's address free.
func (k *Kubelet) start(ctx context.Context, pod *corev1.Pod, r *podRun, sec *corev1.Secret) error {
	ws, err := k.mountWorkspace(ctx, pod)
	if err != nil {
		return err
	}
	root, secretDir := filepath.Join(r.dir, "root"), filepath.Join(r.dir, "secret")
	for _, d := range []string{root, secretDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	vols := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.Secret != nil:
			vols[v.Name] = secretDir
		case v.PersistentVolumeClaim != nil && ws != "":
			vols[v.Name] = ws
		}
	}
	env, err := InitEnv(pod, root, vols)
	if err != nil {
		return err
	}
	if err := k.writeSecret(r, sec); err != nil {
		return err
	}
	home := lookupEnv(env, "HOME")
	if err := os.MkdirAll(home, 0o755); err != nil {
		return err
	}
	// sshd logs in only accounts it can look up, and the login is the
	// sandbox user, whom this machine need not have: the pod's mount
	// namespace gets a passwd with the user in it, as the image has.
	// The user is root here, since the test's files are root's.
	passwd := filepath.Join(r.dir, "passwd")
	if err := writePasswd(passwd, k8s.SandboxUser, home); err != nil {
		return err
	}
	if err := k.freeAddr(r, pod); err != nil {
		return err
	}
	log, err := os.Create(filepath.Join(r.dir, "init.log"))
	if err != nil {
		return err
	}
	defer log.Close() // the child has its own copy
	// PID 1 of a fresh PID namespace, as in a container: SIGKILL to it
	// ends every process the pod started. The mount namespace is the
	// pod's passwd and /proc.
	cmd := exec.Command("/bin/sh", "-c", podShell, "sh", passwd, k.init)
	cmd.Env = append(env, "SBX_SSH_ADDR="+r.ip)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS,
		// Should the test binary die without Close, its pods die too.
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the init: %w", err)
	}
	p := &initProc{cmd: cmd, done: make(chan struct{})}
	k.procs.Go(func() {
		err := cmd.Wait()
		p.code = cmd.ProcessState.ExitCode()
		if p.code < 0 && err != nil {
			p.code = 137 // killed by a signal
		}
		close(p.done)
	})
	k.mu.Lock()
	r.proc = p
	k.mu.Unlock()
	return nil
}

// podShell is PID 1 until it execs the init: it makes the mount
// namespace the pod's (nothing propagates back to this machine), with a
// /proc of the pod's PID namespace and the pod's passwd.
const podShell = `set -e
mount --make-rprivate /
mount -t proc proc /proc
mount --bind "$1" /etc/passwd
exec "$2"`

// writePasswd writes this machine's passwd with user as root, home home.
func writePasswd(path, user, home string) error {
	b, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return err
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if !strings.HasPrefix(l, user+":") {
			lines = append(lines, l)
		}
	}
	lines = append(lines, user+":x:0:0:"+user+":"+home+":/bin/bash")
	return os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}

// writeSecret brings the Secret's data to the pod's Secret volume, as
// kubelet does: the ..data symlink swap the init watches through.
func (k *Kubelet) writeSecret(r *podRun, sec *corev1.Secret) error {
	files := map[string][]byte{}
	for key, v := range sec.Data {
		files[key] = v
	}
	k.mu.Lock()
	r.gen++
	gen := r.gen
	k.mu.Unlock()
	if err := inittest.WriteSecret(filepath.Join(r.dir, "secret"), gen, files); err != nil {
		return fmt.Errorf("secret volume: %w", err)
	}
	k.mu.Lock()
	r.secretRV = sec.ResourceVersion
	k.mu.Unlock()
	return nil
}

func (k *Kubelet) allocIPLocked() string {
	k.nextIP++
	ip := net.IPv4(byte(k.nextIP>>24), byte(k.nextIP>>16), byte(k.nextIP>>8), byte(k.nextIP))
	return ip.String()
}

// freeAddr makes sure the pod's IP and its container ports (sshd's, the
// forwarder's) are free, moving the pod to a fresh IP if one is taken.
func (k *Kubelet) freeAddr(r *podRun, pod *corev1.Pod) error {
	var last error
	for range 20 {
		if last = portsFree(r.ip, pod.Spec.Containers[0].Ports); last == nil {
			return nil
		}
		k.mu.Lock()
		r.ip = k.allocIPLocked()
		k.mu.Unlock()
	}
	return fmt.Errorf("no free pod address: %w", last)
}

func portsFree(ip string, ports []corev1.ContainerPort) error {
	for _, p := range ports {
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(int(p.ContainerPort))))
		if err != nil {
			return err
		}
		ln.Close()
	}
	return nil
}

// mountWorkspace links the workspace mount path to the PVC's directory,
// creating it from its snapshot source on first use, and returns that
// directory ("" for a pod without a PVC).
func (k *Kubelet) mountWorkspace(ctx context.Context, pod *corev1.Pod) (string, error) {
	var claim, mountPath string
	for _, v := range pod.Spec.Volumes {
		if v.Name == "workspace" && v.PersistentVolumeClaim != nil {
			claim = v.PersistentVolumeClaim.ClaimName
		}
	}
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		if m.Name == "workspace" {
			mountPath = m.MountPath
		}
	}
	if claim == "" {
		return "", nil
	}
	pvc, err := k.client.CoreV1().PersistentVolumeClaims(k.ns).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("pvc %s: %w", claim, err)
	}
	// Keyed by the claim's UID, as a CSI driver makes a new volume for
	// a new claim of the same name (an in-place restore's).
	vol := k.volumeDir(pvc)
	if _, err := os.Stat(vol); errors.Is(err, os.ErrNotExist) {
		if ds := pvc.Spec.DataSource; ds != nil && ds.Kind == "VolumeSnapshot" {
			if err := os.CopyFS(vol, os.DirFS(filepath.Join(k.dir, "snapshots", ds.Name))); err != nil {
				return "", fmt.Errorf("restore pvc %s from %s: %w", claim, ds.Name, err)
			}
		}
	}
	if err := os.MkdirAll(vol, 0o755); err != nil {
		return "", err
	}
	// The provider tells SSH sessions the mount path as the workspace;
	// on this machine it is a link to the volume.
	if mountPath != "" {
		if err := os.MkdirAll(filepath.Dir(mountPath), 0o700); err != nil {
			return "", err
		}
		_ = os.Remove(mountPath)
		if err := os.Symlink(vol, mountPath); err != nil {
			return "", err
		}
	}
	return vol, nil
}

// volumeDir is where the claim's volume lives on this node.
func (k *Kubelet) volumeDir(pvc *corev1.PersistentVolumeClaim) string {
	return filepath.Join(k.dir, "volumes", pvc.Name+"-"+string(pvc.UID))
}

// syncSnapshots takes each new snapshot (a copy of its PVC's directory) and
// marks it ready to use.
func (k *Kubelet) syncSnapshots(ctx context.Context) error {
	res := k.dyn.Resource(k8s.SnapshotGVR).Namespace(k.ns)
	list, err := res.List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range list.Items {
		s := &list.Items[i]
		if ready, _, _ := unstructured.NestedBool(s.Object, "status", "readyToUse"); ready {
			continue
		}
		claim, _, _ := unstructured.NestedString(s.Object, "spec", "source", "persistentVolumeClaimName")
		pvc, err := k.client.CoreV1().PersistentVolumeClaims(k.ns).Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("snapshot %s of %s: %w", s.GetName(), claim, err)
		}
		dst := filepath.Join(k.dir, "snapshots", s.GetName())
		_ = os.RemoveAll(dst)
		if err := os.CopyFS(dst, os.DirFS(k.volumeDir(pvc))); err != nil {
			return fmt.Errorf("snapshot %s of %s: %w", s.GetName(), claim, err)
		}
		if err := unstructured.SetNestedField(s.Object, true, "status", "readyToUse"); err != nil {
			return err
		}
		if _, err := res.UpdateStatus(ctx, s, metav1.UpdateOptions{}); ignoreGone(err) != nil {
			return fmt.Errorf("mark snapshot %s ready: %w", s.GetName(), err)
		}
	}
	return nil
}

// stopDeleted stops the pods the watch saw deleted, unless the name
// already runs a successor (a different UID).
func (k *Kubelet) stopDeleted() {
	k.mu.Lock()
	var stale []string
	for name, uid := range k.deleted {
		if r := k.pods[name]; r != nil && r.uid == uid {
			stale = append(stale, name)
		}
	}
	clear(k.deleted)
	k.mu.Unlock()
	for _, name := range stale {
		k.stop(name, true)
	}
}

// stop is a pod's deletion: its init gets SIGTERM and, after the pod's
// grace period, SIGKILL, on a goroutine of its own (the pod's successor
// may start meanwhile: it has its own IP and directory). With forget the
// kubelet drops the pod and, once its init is gone, its files.
func (k *Kubelet) stop(name string, forget bool) {
	k.mu.Lock()
	r := k.pods[name]
	if r == nil {
		k.mu.Unlock()
		return
	}
	if forget {
		delete(k.pods, name)
	}
	r.stopping = true
	p := r.proc
	k.mu.Unlock()
	k.procs.Go(func() {
		if p != nil {
			p.terminate(r.grace)
		}
		if forget {
			_ = os.RemoveAll(r.dir)
		}
	})
}

// releaseClaims does the pvc-protection controller's part: a PVC being
// deleted keeps its kubernetes.io/pvc-protection finalizer while a pod
// uses it and loses it once none does, and only then is it gone.
func (k *Kubelet) releaseClaims(ctx context.Context, pods []corev1.Pod) error {
	used := map[string]bool{}
	for i := range pods {
		for _, v := range pods[i].Spec.Volumes {
			if v.PersistentVolumeClaim != nil {
				used[v.PersistentVolumeClaim.ClaimName] = true
			}
		}
	}
	claims, err := k.client.CoreV1().PersistentVolumeClaims(k.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range claims.Items {
		c := &claims.Items[i]
		if c.DeletionTimestamp == nil || used[c.Name] || !slices.Contains(c.Finalizers, pvcProtection) {
			continue
		}
		c = c.DeepCopy()
		c.Finalizers = slices.DeleteFunc(c.Finalizers, func(f string) bool { return f == pvcProtection })
		if _, err := k.client.CoreV1().PersistentVolumeClaims(k.ns).Update(ctx, c, metav1.UpdateOptions{}); ignoreGone(err) != nil {
			return fmt.Errorf("release pvc %s: %w", c.Name, err)
		}
	}
	return nil
}

const pvcProtection = "kubernetes.io/pvc-protection"

func ignoreGone(err error) error {
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}
