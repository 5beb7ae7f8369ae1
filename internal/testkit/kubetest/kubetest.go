// Package kubetest runs a real Kubernetes control plane for tests: one
// etcd and one kube-apiserver on loopback, with RBAC, the PodSecurity
// admission plugin, server-side field validation and the CRDs the product
// uses. There is no scheduler, controller-manager or kubelet: tests bring
// what they need (control/provider/k8s/k8stest has a test kubelet), and a
// namespace's default ServiceAccount is made by Namespace.
//
// The binaries are built by `make k8s-bins` into a cache folder outside
// the repository; SBX_K8S_BINS names it. A test package starts one
// cluster in TestMain (Main) and each test takes its own namespace.
// Without the binaries the tests skip, naming make k8s-bins, unless
// SBX_K8S_REQUIRED=1 (make test sets it), when they fail.
package kubetest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

const (
	// EnvBins names the folder holding the etcd and kube-apiserver
	// binaries.
	EnvBins = "SBX_K8S_BINS"
	// EnvRequired, set to 1, turns a missing binary into a failure.
	EnvRequired = "SBX_K8S_REQUIRED"
)

// ErrNoBinaries is returned when SBX_K8S_BINS is unset or lacks a binary.
var ErrNoBinaries = errors.New("kubetest: etcd and kube-apiserver not found: run `make k8s-bins` and set " + EnvBins + " (make test does both)")

// Bins returns the paths of etcd and kube-apiserver.
func Bins() (etcd, apiserver string, err error) {
	dir := os.Getenv(EnvBins)
	if dir == "" {
		return "", "", ErrNoBinaries
	}
	etcd, apiserver = filepath.Join(dir, "etcd"), filepath.Join(dir, "kube-apiserver")
	for _, p := range []string{etcd, apiserver} {
		if !fileExists(p) {
			return "", "", fmt.Errorf("%w (missing %s)", ErrNoBinaries, p)
		}
	}
	return etcd, apiserver, nil
}

// Required reports whether a missing cluster must fail tests rather than
// skip them.
func Required() bool { return os.Getenv(EnvRequired) == "1" }

// Cluster is a running etcd and kube-apiserver.
type Cluster struct {
	dir       string
	pki       *pki
	etcd      *process
	apiserver *process
	host      string
	health    *http.Client

	// StartTime is how long Start took, CRDs included.
	StartTime time.Duration
}

// Start runs a new cluster with its files under dir (which the caller
// removes) and waits until it serves, with the CRDs installed.
func Start(ctx context.Context, dir string) (*Cluster, error) {
	began := time.Now()
	etcdBin, apiBin, err := Bins()
	if err != nil {
		return nil, err
	}
	p, err := newPKI(dir)
	if err != nil {
		return nil, fmt.Errorf("kubetest: certificates: %w", err)
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	health, err := tlsClient(p)
	if err != nil {
		return nil, err
	}
	c := &Cluster{
		dir: dir, pki: p, health: health,
		etcd:      etcdProcess(etcdBin, filepath.Join(dir, "etcd"), ports[0], ports[1]),
		apiserver: apiserverProcess(apiBin, p, ports[0], ports[2]),
		host:      "https://127.0.0.1:" + strconv.Itoa(ports[2]),
	}
	if err := c.etcd.start(); err != nil {
		return nil, err
	}
	if err := c.etcd.waitHealthy(ctx, http.DefaultClient, "http://127.0.0.1:"+strconv.Itoa(ports[0])+"/health"); err != nil {
		c.Stop()
		return nil, err
	}
	if err := c.startAPIServer(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	if err := installCRDs(ctx, c.Dynamic()); err != nil {
		c.Stop()
		return nil, err
	}
	c.StartTime = time.Since(began)
	return c, nil
}

func (c *Cluster) startAPIServer(ctx context.Context) error {
	if err := c.apiserver.start(); err != nil {
		return err
	}
	return c.apiserver.waitHealthy(ctx, c.health, c.host+"/readyz")
}

// RestartAPIServer stops kube-apiserver and starts it again on the same
// address: watches break, requests fail meanwhile, etcd keeps the data.
func (c *Cluster) RestartAPIServer(ctx context.Context, down time.Duration) error {
	c.apiserver.stop(10 * time.Second)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(down):
	}
	return c.startAPIServer(ctx)
}

// Stop ends both processes. The caller removes dir.
func (c *Cluster) Stop() {
	c.apiserver.stop(10 * time.Second)
	c.etcd.stop(10 * time.Second)
	c.health.CloseIdleConnections()
}

// Host is the apiserver's URL.
func (c *Cluster) Host() string { return c.host }

// Config is a cluster-admin client configuration (group system:masters).
// Code under test should use As instead, so RBAC applies to it.
func (c *Cluster) Config() *rest.Config {
	return &rest.Config{
		Host: c.host,
		TLSClientConfig: rest.TLSClientConfig{
			CAData: c.pki.caPEM, CertData: c.pki.adminCertPEM, KeyData: c.pki.adminKeyPEM,
		},
		// Tests create many objects at once; client-side throttling would
		// only slow them.
		QPS: 500, Burst: 1000,
	}
}

// As is the admin configuration impersonating ServiceAccount ns/name:
// requests are authorized as that account, through the RBAC objects the
// test applied.
func (c *Cluster) As(ns, name string) *rest.Config {
	rc := c.Config()
	rc.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + ns + ":" + name,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}
	return rc
}

// Client is a cluster-admin clientset.
func (c *Cluster) Client() kubernetes.Interface { return kubernetes.NewForConfigOrDie(c.Config()) }

// Dynamic is a cluster-admin dynamic client.
func (c *Cluster) Dynamic() dynamic.Interface { return dynamic.NewForConfigOrDie(c.Config()) }

// Kubeconfig writes a kubeconfig for the admin to path, for kubectl.
func (c *Cluster) Kubeconfig(path string) error {
	ca, cert, key := filepath.Join(c.dir, "kc-ca.crt"), filepath.Join(c.dir, "kc-admin.crt"), filepath.Join(c.dir, "kc-admin.key")
	for f, b := range map[string][]byte{ca: c.pki.caPEM, cert: c.pki.adminCertPEM, key: c.pki.adminKeyPEM} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			return err
		}
	}
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kubetest
  cluster: {server: %q, certificate-authority: %q}
users:
- name: admin
  user: {client-certificate: %q, client-key: %q}
contexts:
- name: kubetest
  context: {cluster: kubetest, user: admin}
current-context: kubetest
`, c.host, ca, cert, key)
	return os.WriteFile(path, []byte(kc), 0o600)
}
