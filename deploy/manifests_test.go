package deploy_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// crMeta is the metadata deploy/'s custom resources carry.
type crMeta struct {
	Name      string            `json:"name"`
	Namespace string            `json:"namespace"`
	Labels    map[string]string `json:"labels"`
}

// PrometheusRule is the subset of the Prometheus Operator's type the
// manifests use; it is not a client-go type, so it is decoded strictly
// into this instead.
type PrometheusRule struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   crMeta `json:"metadata"`
	Spec       struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert,omitempty"`
				Record      string            `json:"record,omitempty"`
				Expr        string            `json:"expr"`
				For         string            `json:"for,omitempty"`
				Labels      map[string]string `json:"labels,omitempty"`
				Annotations map[string]string `json:"annotations,omitempty"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// rendered is one overlay's objects.
type rendered struct {
	objects []runtime.Object
	rules   []PrometheusRule
	routes  []AlertmanagerConfig
}

var strict = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// render runs `kubectl kustomize dir` and decodes every document strictly.
func render(t *testing.T, dir string) rendered {
	t.Helper()
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatalf("kubectl is required to render deploy/ (apt-get install kubectl): %v", err)
	}
	out, err := exec.Command(kubectl, "kustomize", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, out)
	}
	var r rendered
	rd := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	for {
		doc, err := rd.Read()
		if err != nil {
			break
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		if bytes.Contains(doc, []byte("apiVersion: monitoring.coreos.com/v1\n")) {
			var pr PrometheusRule
			if err := yaml.UnmarshalStrict(doc, &pr); err != nil {
				t.Fatalf("%s: PrometheusRule: %v", dir, err)
			}
			r.rules = append(r.rules, pr)
			continue
		}
		if bytes.Contains(doc, []byte("apiVersion: monitoring.coreos.com/v1alpha1")) {
			var ac AlertmanagerConfig
			if err := yaml.UnmarshalStrict(doc, &ac); err != nil {
				t.Fatalf("%s: AlertmanagerConfig: %v", dir, err)
			}
			r.routes = append(r.routes, ac)
			continue
		}
		obj, gvk, err := strict.Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("%s: strict decode: %v\n%s", dir, err, doc)
		}
		if gvk.Kind == "" {
			t.Fatalf("%s: document without a kind:\n%s", dir, doc)
		}
		r.objects = append(r.objects, obj)
	}
	if len(r.objects) == 0 {
		t.Fatalf("%s rendered no objects", dir)
	}
	return r
}

func find[T runtime.Object](r rendered, name string) (T, bool) {
	var zero T
	for _, o := range r.objects {
		if v, ok := o.(T); ok && metaName(o) == name {
			return v, true
		}
	}
	return zero, false
}

func metaName(o runtime.Object) string {
	if m, ok := o.(interface{ GetName() string }); ok {
		return m.GetName()
	}
	return ""
}

// TestManifestsRender renders base and both overlays and checks what the
// design asks of them.
func TestManifestsRender(t *testing.T) {
	t.Parallel()
	for _, dir := range []string{"base", "overlays/dev", "overlays/production"} {
		t.Run(dir, func(t *testing.T) {
			t.Parallel()
			r := render(t, dir)
			checkEdge(t, r)
			checkControl(t, r)
			checkIsolation(t, r)
			checkMetrics(t, r)
			checkAlerts(t, r)
			checkAlertRoute(t, r)
		})
	}
}

func checkEdge(t *testing.T, r rendered) {
	t.Helper()
	svc, ok := find[*corev1.Service](r, "edge")
	if !ok || svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		t.Fatalf("edge Service missing or not a LoadBalancer: %+v", svc)
	}
	ports := map[int32]string{}
	for _, p := range svc.Spec.Ports {
		ports[p.Port] = p.TargetPort.String()
	}
	// 80 answers ACME HTTP-01 and sends browsers to HTTPS; TLS-ALPN-01 on
	// 443 would do for issuance alone, but people type bare hostnames.
	if ports[22] != "ssh" || ports[443] != "https" || ports[80] != "acme" || len(ports) != 3 {
		t.Errorf("edge Service ports %v; want 22->ssh, 443->https and 80->acme only", ports)
	}
	d, ok := find[*appsv1.Deployment](r, "edge")
	if !ok {
		t.Fatal("no edge Deployment")
	}
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	// Every Service port must land on a listener the edge is told to open,
	// or the load balancer forwards into nothing.
	listens := map[string]string{"ssh": "--ssh-addr=:", "https": "--preview-addr=:", "acme": "--preview-http-addr=:"}
	for _, cp := range c.Ports {
		flag, ok := listens[cp.Name]
		if !ok {
			continue
		}
		want := fmt.Sprintf("%s%d", flag, cp.ContainerPort)
		if !slices.Contains(c.Args, want) {
			t.Errorf("edge container port %s (%d) has no listener: args %v lack %s", cp.Name, cp.ContainerPort, c.Args, want)
		}
		delete(listens, cp.Name)
	}
	if len(listens) > 0 {
		t.Errorf("edge Service targets ports the container does not declare: %v", listens)
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
		t.Fatal("edge has no preStop sleep")
	}
	drain := 30 // SBX_EDGE_SSH_DRAIN in edge-config
	if grace := *pod.TerminationGracePeriodSeconds; grace <= c.Lifecycle.PreStop.Sleep.Seconds+int64(drain) {
		t.Errorf("edge terminationGracePeriodSeconds %d is not longer than preStop %ds + drain %ds", grace, c.Lifecycle.PreStop.Sleep.Seconds, drain)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Error("edge has no /readyz readiness probe")
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("edge pods mount a service account token; the edge never calls the Kubernetes API")
	}
	if _, ok := find[*autoscalingv2.HorizontalPodAutoscaler](r, "edge"); !ok {
		t.Error("no edge HorizontalPodAutoscaler")
	}
	if _, ok := find[*policyv1.PodDisruptionBudget](r, "edge"); !ok {
		t.Error("no edge PodDisruptionBudget")
	}
}

func checkControl(t *testing.T, r rendered) {
	t.Helper()
	d, ok := find[*appsv1.Deployment](r, "control")
	if !ok {
		t.Fatal("no control Deployment")
	}
	if d.Spec.Template.Spec.ServiceAccountName != "control" {
		t.Errorf("control runs as %q; want the control ServiceAccount", d.Spec.Template.Spec.ServiceAccountName)
	}
	if _, ok := find[*policyv1.PodDisruptionBudget](r, "control"); !ok {
		t.Error("no control PodDisruptionBudget")
	}
	var cm *corev1.ConfigMap
	for _, o := range r.objects {
		if c, ok := o.(*corev1.ConfigMap); ok && strings.HasPrefix(c.Name, "control-config") {
			cm = c
		}
	}
	if cm == nil {
		t.Fatal("no control-config ConfigMap")
	}
	if err := validCatalog([]byte(cm.Data["catalog.yaml"])); err != nil {
		t.Errorf("catalog.yaml in control-config: %v", err)
	}
}

// checkIsolation: control's rights are a Role in the sandbox namespace
// only, and sandbox pods are fenced by NetworkPolicies.
func checkIsolation(t *testing.T, r rendered) {
	t.Helper()
	sandboxNS := false
	for _, o := range r.objects {
		switch v := o.(type) {
		case *corev1.Namespace:
			if v.Name != "sbx-sandboxes" {
				continue
			}
			sandboxNS = true
			// The level control/provider/k8s's TestPodsMeetRestricted
			// checks the provider's pods against.
			for _, mode := range []string{"enforce", "audit", "warn"} {
				if got := v.Labels["pod-security.kubernetes.io/"+mode]; got != "restricted" {
					t.Errorf("sandbox namespace pod-security %s level %q; want restricted", mode, got)
				}
				if got := v.Labels["pod-security.kubernetes.io/"+mode+"-version"]; got != "latest" {
					t.Errorf("sandbox namespace pod-security %s-version %q; want latest", mode, got)
				}
			}
		case *rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding:
			t.Errorf("cluster-wide RBAC object %s; control's rights are namespaced", metaName(v))
		case *rbacv1.Role:
			if v.Namespace != "sbx-sandboxes" {
				t.Errorf("Role %s in %s; want sbx-sandboxes", v.Name, v.Namespace)
			}
		}
	}
	if !sandboxNS {
		t.Error("no sbx-sandboxes Namespace")
	}
	np := map[string]*networkingv1.NetworkPolicy{}
	for _, o := range r.objects {
		if v, ok := o.(*networkingv1.NetworkPolicy); ok {
			np[v.Namespace+"/"+v.Name] = v
		}
	}
	deny := np["sbx-sandboxes/default-deny"]
	if deny == nil || len(deny.Spec.PodSelector.MatchLabels) != 0 || len(deny.Spec.PolicyTypes) != 2 || len(deny.Spec.Ingress)+len(deny.Spec.Egress) != 0 {
		t.Errorf("sandbox namespace lacks a default deny of ingress and egress: %+v", deny)
	}
	in := np["sbx-sandboxes/sandbox-sshd-from-edge-and-control"]
	if in == nil || len(in.Spec.Ingress) != 1 || len(in.Spec.Ingress[0].Ports) != 1 || in.Spec.Ingress[0].Ports[0].Port.IntValue() != 2222 {
		t.Fatalf("sandbox ingress policy missing or not sshd only: %+v", in)
	}
	peer := in.Spec.Ingress[0].From[0]
	if peer.NamespaceSelector == nil || peer.PodSelector == nil ||
		fmt.Sprint(peer.PodSelector.MatchExpressions[0].Values) != "[edge control]" {
		t.Errorf("sandbox sshd open to %+v; want edge and control pods of sbx-system", peer)
	}
	checkForwardPolicy(t, np)
	checkLockedEgressPolicy(t, np)
	out := np["sbx-sandboxes/sandbox-egress-internet-only"]
	if out == nil {
		t.Fatal("no sandbox egress policy")
	}
	for _, e := range out.Spec.Egress {
		for _, to := range e.To {
			if to.IPBlock != nil && !containsAll(to.IPBlock.Except, "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16") {
				t.Errorf("sandbox egress %s does not exclude the internal ranges: %v", to.IPBlock.CIDR, to.IPBlock.Except)
			}
		}
	}
}

// checkLockedEgressPolicy: a sandbox pod labelled with a non-open egress
// mode is selected by no policy that opens the internet, and by one that
// allows only DNS and the edge's egress gateway port.
func checkLockedEgressPolicy(t *testing.T, np map[string]*networkingv1.NetworkPolicy) {
	t.Helper()
	locked := map[string]string{"app.kubernetes.io/managed-by": "sbx-control", "sbx.dev/egress": "allowlist"}
	for name, p := range np {
		if p.Namespace != "sbx-sandboxes" || !selects(t, p, locked) {
			continue
		}
		for _, e := range p.Spec.Egress {
			for _, to := range e.To {
				if to.IPBlock != nil {
					t.Errorf("%s opens %s to sandboxes whose egress is allowlist", name, to.IPBlock.CIDR)
				}
			}
		}
	}
	gw := np["sbx-sandboxes/sandbox-egress-gateway-only"]
	if gw == nil || !selects(t, gw, locked) || !selects(t, gw, map[string]string{"app.kubernetes.io/managed-by": "sbx-control", "sbx.dev/egress": "none"}) ||
		selects(t, gw, map[string]string{"app.kubernetes.io/managed-by": "sbx-control", "sbx.dev/egress": "open"}) {
		t.Fatalf("no gateway-only policy for allowlist and none sandboxes only: %+v", gw)
	}
	var ports []string
	for _, e := range gw.Spec.Egress {
		for _, to := range e.To {
			if to.PodSelector == nil {
				t.Errorf("gateway-only egress to %+v; want pods only", to)
				continue
			}
			for _, pt := range e.Ports {
				ports = append(ports, fmt.Sprintf("%s/%s:%d", to.PodSelector.MatchLabels["app.kubernetes.io/name"]+to.PodSelector.MatchLabels["k8s-app"], *pt.Protocol, pt.Port.IntValue()))
			}
		}
	}
	if fmt.Sprint(ports) != "[kube-dns/UDP:53 kube-dns/TCP:53 edge/TCP:3128]" {
		t.Errorf("gateway-only policy allows %v; want DNS and the edge's port 3128", ports)
	}
}

// selects reports whether p's pod selector matches a pod with labels.
func selects(t *testing.T, p *networkingv1.NetworkPolicy, labels map[string]string) bool {
	t.Helper()
	sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
	if err != nil {
		t.Fatalf("%s: %v", p.Name, err)
	}
	return sel.Matches(k8slabels.Set(labels))
}

// checkForwardPolicy: the forward port (2223, the podtcp forwarder) of
// sandbox pods admits the edge's pods only: not control, not another
// namespace, not other sandboxes; and no other policy opens it.
func checkForwardPolicy(t *testing.T, np map[string]*networkingv1.NetworkPolicy) {
	t.Helper()
	const port = 2223
	fwd := np["sbx-sandboxes/sandbox-forward-from-edge"]
	if fwd == nil || fwd.Spec.PodSelector.MatchLabels["app.kubernetes.io/managed-by"] != "sbx-control" || len(fwd.Spec.Ingress) != 1 {
		t.Fatalf("sandbox forwarder policy missing or not one rule for sandbox pods: %+v", fwd)
	}
	rule := fwd.Spec.Ingress[0]
	if len(rule.Ports) != 1 || rule.Ports[0].Port.IntValue() != port {
		t.Errorf("sandbox forwarder policy opens %+v; want port %d only", rule.Ports, port)
	}
	if len(rule.From) != 1 {
		t.Fatalf("sandbox forwarder policy admits %+v; want the edge's pods only", rule.From)
	}
	peer := rule.From[0]
	if peer.IPBlock != nil || peer.NamespaceSelector == nil || peer.PodSelector == nil ||
		fmt.Sprint(peer.NamespaceSelector.MatchLabels) != "map[kubernetes.io/metadata.name:sbx-system]" ||
		len(peer.NamespaceSelector.MatchExpressions) != 0 ||
		fmt.Sprint(peer.PodSelector.MatchLabels) != "map[app.kubernetes.io/name:edge]" ||
		len(peer.PodSelector.MatchExpressions) != 0 {
		t.Errorf("sandbox forwarder open to %+v; want the edge pods of sbx-system only", peer)
	}
	for name, p := range np {
		if p == fwd || p.Namespace != "sbx-sandboxes" {
			continue
		}
		for _, r := range p.Spec.Ingress {
			opens := len(r.Ports) == 0
			for _, pp := range r.Ports {
				opens = opens || pp.Port == nil || pp.Port.IntValue() == port
			}
			if opens {
				t.Errorf("policy %s also opens the forward port %d of sandbox pods: %+v", name, port, r)
			}
		}
	}
}

// checkMetrics: control and the edge serve metrics (which name accounts
// and sandboxes) on a port of their own, scraped through a headless
// <name>-metrics Service and reachable from the monitoring namespace only;
// the public Services never carry that port.
func checkMetrics(t *testing.T, r rendered) {
	t.Helper()
	for _, name := range []string{"control", "edge"} {
		d, ok := find[*appsv1.Deployment](r, name)
		if !ok {
			t.Fatalf("no %s Deployment", name)
		}
		c := d.Spec.Template.Spec.Containers[0]
		var port int32
		for _, cp := range c.Ports {
			if cp.Name == "metrics" {
				port = cp.ContainerPort
			}
		}
		if port == 0 {
			t.Errorf("%s declares no metrics container port", name)
			continue
		}
		if want := fmt.Sprintf("--metrics-addr=:%d", port); !slices.Contains(c.Args, want) {
			t.Errorf("%s args %v lack %s", name, c.Args, want)
		}
		for _, cp := range c.Ports {
			if cp.Name != "metrics" && cp.ContainerPort == port {
				t.Errorf("%s port %s shares the metrics port %d", name, cp.Name, port)
			}
		}
		public, ok := find[*corev1.Service](r, name)
		if !ok {
			t.Fatalf("no %s Service", name)
		}
		for _, p := range public.Spec.Ports {
			if p.TargetPort.String() == "metrics" || p.TargetPort.IntValue() == int(port) {
				t.Errorf("public Service %s carries the metrics port: %+v", name, p)
			}
		}
		ms, ok := find[*corev1.Service](r, name+"-metrics")
		if !ok {
			t.Errorf("no %s-metrics Service for Prometheus", name)
		} else if a := ms.Annotations; a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != fmt.Sprint(port) ||
			len(ms.Spec.Ports) != 1 || ms.Spec.Ports[0].TargetPort.String() != "metrics" {
			t.Errorf("%s-metrics Service %+v %+v; want scrape annotations for port %d and only the metrics port", name, a, ms.Spec.Ports, port)
		}
		np, ok := find[*networkingv1.NetworkPolicy](r, name+"-ingress")
		if !ok || np.Spec.PodSelector.MatchLabels["app.kubernetes.io/name"] != name {
			t.Errorf("no %s-ingress NetworkPolicy selecting %s pods", name, name)
			continue
		}
		admitted := false
		for _, rule := range np.Spec.Ingress {
			opens := len(rule.Ports) == 0
			for _, p := range rule.Ports {
				opens = opens || p.Port.IntValue() == int(port)
			}
			if !opens {
				continue
			}
			if len(rule.From) == 0 {
				t.Errorf("%s-ingress opens the metrics port %d to everyone", name, port)
			}
			for _, from := range rule.From {
				if from.NamespaceSelector == nil || from.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "monitoring" || from.IPBlock != nil {
					t.Errorf("%s-ingress opens the metrics port %d to %+v; want the monitoring namespace only", name, port, from)
				}
			}
			admitted = true
		}
		if !admitted {
			t.Errorf("%s-ingress does not let Prometheus reach the metrics port %d", name, port)
		}
	}
}

func containsAll(list []string, want ...string) bool {
	have := map[string]bool{}
	for _, v := range list {
		have[v] = true
	}
	for _, w := range want {
		if !have[w] {
			return false
		}
	}
	return true
}

// checkAlerts: the capacity and job-failure alerts exist, the ones that
// judge a rate or a gauge last, and every alert reads series control
// exports.
func checkAlerts(t *testing.T, r rendered) {
	t.Helper()
	names := exportedMetrics(t)
	want := map[string]bool{"SandboxPoolCapacityShortfall": true, "SandboxJobsKeepFailing": true, "SandboxJobsGivenUp": false}
	found := map[string]bool{}
	for _, pr := range r.rules {
		for _, g := range pr.Spec.Groups {
			for _, rule := range g.Rules {
				if sustained, ok := want[rule.Alert]; ok {
					found[rule.Alert] = true
					if sustained && rule.For == "" {
						t.Errorf("alert %s fires without a sustained period (for:)", rule.Alert)
					}
				}
				for _, tok := range strings.FieldsFunc(rule.Expr, func(r rune) bool {
					return !(r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
				}) {
					if strings.HasPrefix(tok, "sbx_") && !names[tok] {
						t.Errorf("alert %s reads %s, which control does not export", rule.Alert, tok)
					}
				}
			}
		}
	}
	for name := range want {
		if !found[name] {
			t.Errorf("no %s alert", name)
		}
	}
}

var sbxEnv = regexp.MustCompile(`"(SBX_[A-Z0-9_]+)"`)

// readsEnv lists the SBX_* variables a command's sources name.
func readsEnv(t *testing.T, dir string) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "cmd", dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("sources of cmd/%s: %v", dir, err)
	}
	names := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range sbxEnv.FindAllStringSubmatch(string(b), -1) {
			names[m[1]] = true
		}
	}
	return names
}

// TestManifestEnvIsRead: every SBX_* variable the manifests hand a
// container (its ConfigMap or env) is one its command reads, so a typo
// or a renamed flag cannot silently drop a setting.
func TestManifestEnvIsRead(t *testing.T) {
	t.Parallel()
	r := render(t, "overlays/production")
	reads := map[string]map[string]bool{"control": readsEnv(t, "control"), "edge": readsEnv(t, "edge")}
	configMaps := map[string]*corev1.ConfigMap{}
	for _, o := range r.objects {
		if cm, ok := o.(*corev1.ConfigMap); ok {
			configMaps[cm.Name] = cm
		}
	}
	for _, name := range []string{"control", "edge"} {
		d, ok := find[*appsv1.Deployment](r, name)
		if !ok {
			t.Fatalf("no %s Deployment", name)
		}
		c := d.Spec.Template.Spec.Containers[0]
		var given []string
		for _, e := range c.Env {
			given = append(given, e.Name)
		}
		for _, src := range c.EnvFrom {
			cm := configMaps[src.ConfigMapRef.Name]
			if cm == nil {
				t.Fatalf("%s reads ConfigMap %s, which is not rendered", name, src.ConfigMapRef.Name)
			}
			for k := range cm.Data {
				given = append(given, k)
			}
		}
		if len(given) == 0 {
			t.Fatalf("%s gets no environment; the check would be vacuous", name)
		}
		for _, k := range given {
			if strings.HasPrefix(k, "SBX_") && !reads[name][k] {
				t.Errorf("%s is given %s, which cmd/%s never reads", name, k, name)
			}
		}
	}
}
