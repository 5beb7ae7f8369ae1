package k8s

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"

	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/internal/initproto"
)

var update = flag.Bool("update", false, "rewrite golden files")

// objectBuilder is a provider on the test catalog whose clients are never
// called: for tests of the objects it builds.
func objectBuilder(t *testing.T) (*Provider, Catalog) {
	t.Helper()
	cat, err := LoadCatalog(filepath.Join("testdata", "catalog.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{Namespace: "sandboxes", Catalog: cat},
		Deps{Client: fake.NewClientset(), Dynamic: dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())})
	if err != nil {
		t.Fatal(err)
	}
	return p, cat
}

// TestObjectsGolden pins the pod, PVC and Secret of a sandbox per platform.
// Run with -update after an intended change and review the diff.
func TestObjectsGolden(t *testing.T) {
	p, cat := objectBuilder(t)
	for _, profile := range []string{"tuist-linux-medium", "tuist-macos-16-large"} {
		t.Run(profile, func(t *testing.T) {
			shape, _ := cat.Shape(profile)
			spec := provider.Spec{
				SandboxID: "sbx-goldengoldengoldengolden12", AccountID: "acct-golden", Profile: shape.Name,
				Platform: shape.Platform, HostKeyPEM: []byte("HOST KEY PEM"), UserCAKey: "ssh-ed25519 AAAA ca",
				Files: []provider.File{{Path: ".config/sbx/grants/p1.token", Data: []byte("tok")}},
				// In the Secret's env.json, never in the pod's env.
				Env: []string{"HTTP_PROXY=http://sbx:golden-credential@gw:3128", "GREETING=say \"hi\""},
			}
			n := namesFor(spec.SandboxID)
			sec, err := p.secret(n, RoleSandbox, shape, &spec)
			if err != nil {
				t.Fatal(err)
			}
			pod := p.pod(n, RoleSandbox, shape, &spec)
			if b, _ := yaml.Marshal(pod); bytes.Contains(b, []byte("golden-credential")) {
				t.Errorf("the spec's Env shows in the pod object:\n%s", b)
			}
			objs := []any{pod, sec}
			if shape.Platform == PlatformLinux {
				objs = append(objs, p.pvc(n, RoleSandbox, shape, &spec, ""))
			}
			var buf bytes.Buffer
			for _, o := range objs {
				b, err := yaml.Marshal(o)
				if err != nil {
					t.Fatal(err)
				}
				buf.WriteString("---\n")
				buf.Write(b)
			}
			golden := filepath.Join("testdata", shape.Platform+".golden.yaml")
			if *update {
				if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(buf.Bytes(), want) {
				t.Errorf("objects for %s differ from %s (run with -update and review):\n%s", profile, golden, buf.String())
			}
		})
	}
}

// TestEndpoint: sshd and the forwarder are reached on the pod's IP, each
// on its port.
func TestEndpoint(t *testing.T) {
	p, _ := objectBuilder(t)
	for _, tc := range []struct {
		ip, addr, forward string
	}{
		{"10.4.0.7", "10.4.0.7:2222", "10.4.0.7:2223"},
		{"fd00::7", "[fd00::7]:2222", "[fd00::7]:2223"},
	} {
		t.Run(tc.ip, func(t *testing.T) {
			pod := &corev1.Pod{Status: corev1.PodStatus{PodIP: tc.ip}}
			pod.Name = "sbx-ep"
			ep := p.endpoint(pod, PlatformLinux)
			if ep.Addr != tc.addr || ep.ForwardAddr != tc.forward || ep.User != SandboxUser {
				t.Errorf("endpoint of a pod at %s: %+v; want Addr %s, ForwardAddr %s, User %s", tc.ip, ep, tc.addr, tc.forward, SandboxUser)
			}
		})
	}
}

// TestSecretCarriesServices: the spec's Services reach the pod's init in
// its Secret (initproto.ServicesFile), as the init reads them, so they
// start with the pod; a spec without any adds no key, and a declaration
// the init would refuse fails the Secret rather than reach the pod.
func TestSecretCarriesServices(t *testing.T) {
	p, cat := objectBuilder(t)
	shape, _ := cat.Shape("tuist-linux-medium")
	n := namesFor("sbx-services")
	spec := provider.Spec{SandboxID: "sbx-services", HostKeyPEM: []byte("HOST KEY PEM"), UserCAKey: "ssh-ed25519 AAAA ca"}
	sec, err := p.secret(n, RoleSandbox, shape, &spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := sec.Data[initproto.ServicesFile]; ok {
		t.Errorf("a spec without services has %s in its Secret", initproto.ServicesFile)
	}
	spec.Services = []initproto.Service{
		{Name: "web", Command: "npm", Args: []string{"run", "dev"}, Port: 3000, Env: map[string]string{"TOKEN": "s3cret"}},
		{Name: "worker", Command: "./worker.sh", Cwd: "app"},
	}
	if sec, err = p.secret(n, RoleSandbox, shape, &spec); err != nil {
		t.Fatal(err)
	}
	got, err := initproto.ParseServices(sec.Data[initproto.ServicesFile])
	if err != nil || !reflect.DeepEqual(got, spec.Services) {
		t.Fatalf("the Secret's services: %+v, %v; want %+v", got, err, spec.Services)
	}
	if b, _ := yaml.Marshal(p.pod(n, RoleSandbox, shape, &spec)); bytes.Contains(b, []byte("s3cret")) {
		t.Errorf("a service's env shows in the pod object:\n%s", b)
	}
	spec.Services = append(spec.Services, initproto.Service{Name: "Bad Name", Command: "x"})
	if _, err := p.secret(n, RoleSandbox, shape, &spec); err == nil {
		t.Error("a Secret was built for a service the init would refuse")
	}
}
