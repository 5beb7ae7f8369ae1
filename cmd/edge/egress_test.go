package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestEgressAgainstControl: the edge's egress gateway asks control about
// a sandbox's proxy credential over the internal API. curl with the
// sandbox's credential reaches a loopback upstream in the trusted range,
// is refused control's internal API (one of the product's listeners,
// even inside the trusted range), without the credential gets 407, and
// once the sandbox
// is deleted the credential opens nothing. Every address dialed is on
// loopback: refused ones are never dialed.
func TestEgressAgainstControl(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is required (apt-get install curl; .ci/run installs it)")
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "upstream says hi") }))
	t.Cleanup(up.Close)
	s := startStack(t, "--egress-listen", "127.0.0.1:0", "--egress-trust", "127.0.0.0/8")
	if s.edgeEgress == "" {
		t.Fatal("no egress listener")
	}
	id := s.readySandbox(t)
	secret, err := s.svc.Life.ProxyCredential(id)
	if err != nil {
		t.Fatal(err)
	}
	proxy := "http://" + id + ":" + secret + "@" + s.edgeEgress
	curl := func(proxy string, target string) string {
		cmd := exec.Command("curl", "-sS", "-v", "--max-time", "10", "-x", proxy, target)
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		out, _ := cmd.CombinedOutput()
		if strings.Contains(string(out), secret) && !strings.Contains(target, secret) {
			// curl -v prints the Proxy-Authorization header in base64,
			// never the secret itself; this guards the gateway's answers.
			t.Errorf("the secret appears in curl's output for %s", target)
		}
		return string(out)
	}
	if out := curl(proxy, up.URL+"/"); !strings.Contains(out, "upstream says hi") {
		t.Errorf("allowed upstream through the gateway: %s", out)
	}
	internal, _ := url.Parse(s.svc.InternalURL())
	if out := curl(proxy, "http://"+internal.Host+"/internal/v1/healthz"); !strings.Contains(out, "403") || !strings.Contains(out, "own listeners") {
		t.Errorf("control's internal API through the gateway: want a 403 naming the product's own listeners, got %s", out)
	}
	if out := curl("http://"+s.edgeEgress, up.URL+"/"); !strings.Contains(out, "407") {
		t.Errorf("without a credential: want 407, got %s", out)
	}
	if out := curl("http://"+id+":sbx_px_wrong@"+s.edgeEgress, up.URL+"/"); !strings.Contains(out, "407") {
		t.Errorf("with a wrong credential: want 407, got %s", out)
	}
	if code := s.call(t, "DELETE", "/api/v1/sandboxes/"+id, nil, nil); code >= 300 {
		t.Fatalf("delete: %d", code)
	}
	// Control's answers are cached for up to 2 s; a deleted sandbox's
	// credential must stop working within that.
	deadline := 50
	for i := 0; ; i++ {
		out := curl(proxy, up.URL+"/")
		if strings.Contains(out, "407") {
			break
		}
		if i == deadline {
			t.Fatalf("the credential of a deleted sandbox still opens the gateway: %s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestConfigEgress(t *testing.T) {
	t.Parallel()
	env := map[string]string{"SBX_CONTROL_URL": "http://c:1", "SBX_INTERNAL_SECRET": "s", "SBX_EDGE_HOST_KEY_DIR": "/k",
		"SBX_CA_KEY_FILE": "/ca", "SBX_REDIS_URL": "redis://r:6379/0",
		"SBX_EDGE_EGRESS_ADDR": ":3128", "SBX_EDGE_EGRESS_TRUST": "10.1.0.0/16,10.2.0.0/16", "SBX_EDGE_EGRESS_CLUSTER_RANGES": "10.96.0.0/12",
		"SBX_EDGE_EGRESS_OWN": "10.1.0.5:5432"}
	getenv := func(k string) string { return env[k] }
	c, _, err := parseConfig(nil, getenv)
	if err != nil {
		t.Fatal(err)
	}
	if c.Egress.Addr != ":3128" || len(c.Egress.Trust) != 2 || len(c.Egress.Cluster) != 1 || len(c.Egress.Own) != 1 {
		t.Fatalf("from the environment: %+v", c.Egress)
	}
	c, _, err = parseConfig([]string{"--egress-trust", "127.0.0.1", "--egress-trust", "::1"}, getenv)
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("::1/128")}
	if len(c.Egress.Trust) != 2 || c.Egress.Trust[0] != want[0] || c.Egress.Trust[1] != want[1] {
		t.Fatalf("flags over the environment: trust %v, want %v", c.Egress.Trust, want)
	}
	env["SBX_EDGE_EGRESS_TRUST"] = "10.0.0.1/8"
	if _, _, err := parseConfig(nil, getenv); err == nil || !strings.Contains(err.Error(), "SBX_EDGE_EGRESS_TRUST") {
		t.Errorf("a bad trusted range: %v, want an error naming the variable", err)
	}
	if _, _, err := parseConfig([]string{"--egress-cluster-range", "nope"}, getenv); err == nil {
		t.Error("a bad cluster range was accepted")
	}
}
