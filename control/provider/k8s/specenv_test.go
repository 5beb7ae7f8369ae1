package k8s_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sbxedge/sbx/control/provider/k8s"
	"github.com/sbxedge/sbx/internal/initproto"
	"github.com/sbxedge/sbx/internal/podssh"
)

// TestSpecEnvReachesPods: the spec's Env (the egress proxy with its
// credential, a create's env and secrets) reaches every SSH exec of a
// cold-booted pod and of a claimed warm pod, which booted before the Env
// was known, and the services the init starts; values with spaces,
// quotes, '#' and '$' arrive as sent. It travels in the sandbox's
// Secret: no value shows in the pod object (what kubectl get -o yaml and
// describe show), in the namespace's events, or in the pod's log. An Env
// the init could not deliver (a newline) fails the provision without
// naming the value and creates nothing.
func TestSpecEnvReachesPods(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := ctxT(t)
	st := openSQLite(t)
	p := e.warmProvider(t, st)
	replenishUntil(t, p, st, "2 warm pods", func(f map[string]string) bool { return len(f) == 2 })

	const tricky = `say "hi" \ it's é #1 $HOME`
	pool := podssh.NewPool(e.ca, nil)
	defer pool.Close()
	var secrets []string
	pods := map[string]string{} // sandbox -> pod
	for _, tc := range []struct{ id, profile, boot string }{
		{"sbx-env-cold", "tuist-linux-medium", k8s.BootCold},
		{"sbx-env-warm", "tuist-linux-warm", k8s.BootWarm},
	} {
		cred, token := "sbx_px_"+tc.id+"_cred", "tok-"+tc.id+"-secretvalue"
		secrets = append(secrets, cred, token)
		spec := e.spec(t, tc.id, tc.profile)
		spec.Env = []string{
			"HTTP_PROXY=http://" + tc.id + ":" + cred + "@127.0.0.1:3128", "HTTPS_PROXY=http://" + tc.id + ":" + cred + "@127.0.0.1:3128",
			"NO_PROXY=localhost,127.0.0.1", "API_TOKEN=" + token, "GREETING=" + tricky,
		}
		ep, err := p.Provision(ctx, spec)
		if err != nil {
			t.Fatalf("provision %s: %v", tc.id, err)
		}
		if ep.Boot != tc.boot {
			t.Errorf("%s: boot %q; want %q", tc.id, ep.Boot, tc.boot)
		}
		_, pub, _ := e.keys.Key(tc.id)
		target := podssh.Target{SandboxID: tc.id, Addr: ep.Addr, User: ep.User, HostKey: pub, Workspace: ep.Workspace}
		res, err := pool.Exec(ctx, target, podssh.ExecRequest{Command: `printf '%s|' "$HTTP_PROXY" "$HTTPS_PROXY" "$NO_PROXY" "$API_TOKEN" "$GREETING"`})
		want := "http://" + tc.id + ":" + cred + "@127.0.0.1:3128|http://" + tc.id + ":" + cred + "@127.0.0.1:3128|localhost,127.0.0.1|" + token + "|" + tricky + "|"
		if err != nil || string(res.Stdout) != want {
			t.Errorf("%s (%s): exec sees %q (stderr %q, %v)\nwant %q", tc.id, tc.boot, res.Stdout, res.Stderr, err, want)
		}

		// A service the init starts sees it too.
		c, err := pool.Client(ctx, target)
		if err != nil {
			t.Fatal(err)
		}
		svc := initproto.Service{Name: "envdump", Command: `printf '%s|' "$HTTP_PROXY" "$API_TOKEN" > svc-env.tmp && mv svc-env.tmp svc-env; exec sleep 600`}
		if _, err := (initproto.Client{SSH: c}).Sync(ctx, []initproto.Service{svc}); err != nil {
			t.Fatalf("%s: sync: %v", tc.id, err)
		}
		pod, err := e.client.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: k8s.LabelSandbox + "=" + tc.id})
		if err != nil || len(pod.Items) != 1 {
			t.Fatalf("%s: pods %v, %v", tc.id, pod, err)
		}
		pods[tc.id] = pod.Items[0].Name
		var b []byte
		file := filepath.Join(strings.ReplaceAll(e.kubelet.WorkspaceDir(), "%s", pods[tc.id]), "svc-env")
		for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			if b, err = os.ReadFile(file); err == nil {
				break
			}
		}
		if want := "http://" + tc.id + ":" + cred + "@127.0.0.1:3128|" + token + "|"; string(b) != want {
			t.Errorf("%s: the service saw %q (%v); want %q", tc.id, b, err, want)
		}
	}

	// Nowhere outside the Secret: the pod objects, the events, the logs.
	list, err := e.client.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	podJSON, _ := json.Marshal(list)
	events, err := e.client.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eventJSON, _ := json.Marshal(events)
	for id, pod := range pods {
		log, err := e.kubelet.InitLog(pod)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range secrets {
			if strings.Contains(string(log), s) {
				t.Errorf("the log of %s's pod %s shows a secret value", id, pod)
			}
		}
	}
	for _, s := range secrets {
		if strings.Contains(string(podJSON), s) {
			t.Errorf("a secret value shows in the pod objects")
		}
		if strings.Contains(string(eventJSON), s) {
			t.Errorf("a secret value shows in the namespace's events")
		}
	}
	sec, err := e.client.CoreV1().Secrets(e.ns).Get(ctx, "sbx-env-cold-ssh", metav1.GetOptions{})
	if err != nil || !strings.Contains(string(sec.Data[initproto.EnvFile]), "tok-sbx-env-cold-secretvalue") {
		t.Errorf("the cold sandbox's Secret does not carry its env: %v", err)
	}

	// An Env the init could not deliver: refused, nothing created, no
	// warm pod taken.
	free := len(freeRows(t, st))
	for _, profile := range []string{"tuist-linux-medium", "tuist-linux-warm"} {
		bad := e.spec(t, "sbx-env-bad", profile)
		bad.Env = []string{"BAD=one\nsecond-line-secret"}
		if _, err := p.Provision(ctx, bad); err == nil || strings.Contains(err.Error(), "second-line-secret") {
			t.Errorf("%s: provision with a newline in an env value: %v; want an error that does not show the value", profile, err)
		}
		if p, c, s, v := count(t, e, "sbx-env-bad"); p+c+s+v != 0 {
			t.Errorf("%s: a refused env left %d pods, %d pvcs, %d secrets, %d snapshots", profile, p, c, s, v)
		}
	}
	if now := len(freeRows(t, st)); now != free {
		t.Errorf("a refused env took a warm pod: %d free before, %d after", free, now)
	}
	for id := range pods {
		if err := p.Destroy(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
}
