package control_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sbxedge/sbx/control"
	"github.com/sbxedge/sbx/control/controltest"
	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/provider/k8s"
	"github.com/sbxedge/sbx/control/provider/k8s/k8stest"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/testkit/testdb"
)

// TestKubernetesEndToEnd runs the spine's flow through the k8s provider's
// code path: control on real Postgres with a real kube-apiserver (control
// under deploy/'s Role) and the test kubelet. Create claims a warm pod, exec and
// files reach it over SSH, an idle suspend goes through a VolumeSnapshot
// and exec wakes it, a pod killed for memory closes the billing session
// through the Pod Watcher, and delete removes every object.
func TestKubernetesEndToEnd(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kc := k8stest.NewCluster(t)
	kl, ns := kc.Kubelet, kc.Namespace
	client, dyn := kc.Admin, kc.AdminDynamic // the test's own checks
	cat, err := k8s.LoadCatalog(filepath.Join("provider", "k8s", "testdata", "catalog.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	svc, tok := controltest.Start(t, control.Config{
		DatabaseURL: testdb.Postgres(t),
		SSHHost:     "127.0.0.1", SSHPort: 2222,
		Lifecycle: lifecycle.Config{ReapInterval: time.Second},
		Provider: k8stest.Opener{
			Config: k8s.Config{
				Namespace: ns, Catalog: cat, SSHPort: kl.SSHPort(), ForwardPort: kl.ForwardPort(), WorkspaceDir: kl.WorkspaceDir(),
				PollInterval: 20 * time.Millisecond, ReplenishInterval: 100 * time.Millisecond,
			},
			Client: kc.Client, Dynamic: kc.Dynamic,
		},
	})
	c := &apiClient{t: t, base: svc.URL(), token: tok}

	// The warm pool fills before the first create.
	waitFor(t, "2 warm pods", func() bool {
		rows, _ := svc.Store.(k8s.WarmStore).WarmPods(ctx)
		return len(rows) == 2
	})
	var sb struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	c.do("POST", "/api/v1/sandboxes", `{"profile":"tuist-linux-warm"}`, 201, &sb)
	waitFor(t, "sandbox ready", func() bool {
		c.do("GET", "/api/v1/sandboxes/"+sb.ID, "", 200, &sb)
		return sb.Status == "ready"
	})
	events, _ := svc.Store.Events(ctx, sb.ID, 0)
	if !hasEvent(events, store.StateReady, k8s.BootWarm) {
		t.Errorf("no ready event with reason warm_hit: %+v", events)
	}

	c.do("PUT", "/api/v1/sandboxes/"+sb.ID+"/files/notes/hello.txt", "hello from k8s", 0, nil)
	var res struct {
		ExitCode int    `json:"exit_code"`
		Stdout   string `json:"stdout"`
	}
	c.do("POST", "/api/v1/sandboxes/"+sb.ID+"/exec", `{"command":"cat notes/hello.txt"}`, 200, &res)
	if res.ExitCode != 0 || res.Stdout != "hello from k8s" {
		t.Errorf("exec cat: %+v; want hello from k8s", res)
	}

	// Idle offload through a VolumeSnapshot; exec wakes it.
	if err := svc.Life.Suspend(ctx, sb.ID, "test"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "sandbox suspended", func() bool {
		c.do("GET", "/api/v1/sandboxes/"+sb.ID, "", 200, &sb)
		return sb.Status == "suspended"
	})
	snaps, err := dyn.Resource(k8s.SnapshotGVR).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: k8s.LabelSandbox + "=" + sb.ID})
	if err != nil || len(snaps.Items) != 1 {
		t.Fatalf("snapshots while suspended: %v, %v; want 1", snaps, err)
	}
	c.do("POST", "/api/v1/sandboxes/"+sb.ID+"/exec", `{"command":"cat notes/hello.txt"}`, 200, &res)
	if res.ExitCode != 0 || res.Stdout != "hello from k8s" {
		t.Errorf("exec after wake: %+v; want the file kept across suspend", res)
	}

	// The pod dies for memory: the Pod Watcher ends the sandbox.
	pods, _ := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: k8s.LabelSandbox + "=" + sb.ID})
	if len(pods.Items) != 1 {
		t.Fatalf("%d pods for %s; want 1", len(pods.Items), sb.ID)
	}
	fin := time.Now().UTC().Truncate(time.Millisecond)
	if err := kl.Fail(ctx, pods.Items[0].Name, k8stest.Termination{ContainerReason: "OOMKilled", ExitCode: 137, FinishedAt: fin}); err != nil {
		t.Fatal(err)
	}
	var ended struct {
		Status    string  `json:"status"`
		EndReason *string `json:"end_reason"`
	}
	waitFor(t, "sandbox terminated", func() bool {
		c.do("GET", "/api/v1/sandboxes/"+sb.ID, "", 200, &ended)
		return ended.Status == "terminated"
	})
	if ended.EndReason == nil || *ended.EndReason != k8s.ReasonOOMKilled {
		got := "<none>"
		if ended.EndReason != nil {
			got = *ended.EndReason
		}
		t.Errorf("end reason %s; want oom_killed", got)
	}
	// Terminate removed every object, snapshot included. A PVC lingers
	// while its pvc-protection finalizer is released (by the test
	// kubelet, as by a cluster's controller): wait for it to go.
	for _, list := range []func() int{
		func() int {
			l, _ := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: k8s.LabelSandbox + "=" + sb.ID})
			return len(l.Items)
		},
		func() int {
			l, _ := client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{LabelSelector: k8s.LabelSandbox + "=" + sb.ID})
			return len(l.Items)
		},
		func() int {
			l, _ := dyn.Resource(k8s.SnapshotGVR).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: k8s.LabelSandbox + "=" + sb.ID})
			return len(l.Items)
		},
	} {
		waitFor(t, "every object of "+sb.ID+" gone after terminate", func() bool { return list() == 0 })
	}

	// A second sandbox: create, then delete through the API.
	var sb2 struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	c.do("POST", "/api/v1/sandboxes", `{"profile":"tuist-linux-warm"}`, 201, &sb2)
	waitFor(t, "second sandbox ready", func() bool {
		c.do("GET", "/api/v1/sandboxes/"+sb2.ID, "", 200, &sb2)
		return sb2.Status == "ready"
	})
	c.do("DELETE", "/api/v1/sandboxes/"+sb2.ID, "", 0, nil)
	waitFor(t, "second sandbox's pod gone", func() bool {
		l, _ := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: k8s.LabelSandbox + "=" + sb2.ID})
		return len(l.Items) == 0
	})
}

func hasEvent(events []store.Event, state store.State, reason string) bool {
	for _, e := range events {
		if e.State == state && e.Reason == reason {
			return true
		}
	}
	return false
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type apiClient struct {
	t     *testing.T
	base  string
	token string
}

// do sends a request and decodes a JSON answer into out; want 0 accepts
// any 2xx status.
func (c *apiClient) do(method, path, body string, want int, out any) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if strings.HasPrefix(body, "{") {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if (want != 0 && resp.StatusCode != want) || (want == 0 && resp.StatusCode/100 != 2) {
		c.t.Fatalf("%s %s: %d %s; want %d", method, path, resp.StatusCode, bytes.TrimSpace(b), want)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			c.t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
}
