package controlclient

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/podssh"
)

// TestResolveTarget: a ready route's target carries the forwarder's
// address; a sleeping one has no target.
func TestResolveTarget(t *testing.T) {
	t.Parallel()
	routes := map[string]string{
		"ready": `{"sandbox_id":"sb1","account_id":"a1","port":3000,"access":"private","host_policy":"forward","state":"ready",
			"addr":"10.0.0.7:22","user":"sbx","host_key":"ssh-ed25519 AAAA","workspace":"/workspace","forward_addr":"10.0.0.7:2223"}`,
		"no-forwarder": `{"sandbox_id":"sb1","account_id":"a1","port":3000,"access":"private","host_policy":"forward","state":"ready",
			"addr":"10.0.0.7:22","user":"sbx","host_key":"ssh-ed25519 AAAA","workspace":"/workspace"}`,
		"asleep": `{"sandbox_id":"sb1","account_id":"a1","port":3000,"access":"private","host_policy":"forward","state":"suspended"}`,
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+edgeapi.PathPreviewRoute, func(w http.ResponseWriter, r *http.Request) {
		var req edgeapi.PreviewRouteRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			t.Errorf("decode: %v", err)
		}
		_, _ = w.Write([]byte(routes[req.Label]))
	})
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	c, err := New(Config{BaseURL: ts.URL, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	base := podssh.Target{SandboxID: "sb1", Addr: "10.0.0.7:22", User: "sbx", HostKey: "ssh-ed25519 AAAA", Workspace: "/workspace"}
	withFwd := base
	withFwd.ForwardAddr = "10.0.0.7:2223"
	for label, want := range map[string]podssh.Target{"ready": withFwd, "no-forwarder": base, "asleep": {}} {
		rt, err := c.Resolve(context.Background(), label)
		if err != nil {
			t.Fatalf("Resolve(%s): %v", label, err)
		}
		if rt.Ready != (want.Addr != "") || rt.Target != want {
			t.Errorf("Resolve(%s): ready %v target %+v, want %+v", label, rt.Ready, rt.Target, want)
		}
	}
}
