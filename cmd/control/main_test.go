package main

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control"
	"github.com/sbxedge/sbx/control/standalone"
	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/testkit/servicetest"
	"github.com/sbxedge/sbx/internal/testkit/testdb"
)

const secret = "control-test-secret-control-test-secret"

// secretEnv is an environment holding only the internal API's secret.
func secretEnv(k string) string {
	if k == "SBX_INTERNAL_SECRET" {
		return secret
	}
	return ""
}

// catalog is a valid pools-and-profiles file for --k8s-catalog.
const catalog = "../../control/provider/k8s/testdata/catalog.yaml"

// required are the flags parseConfig cannot do without: a data dir,
// Postgres, Redis and the k8s provider's catalog (parsed, never dialled).
func required(t *testing.T) []string {
	return []string{"--data-dir", t.TempDir(), "--database-url", "postgres://127.0.0.1/none",
		"--redis-url", "redis://127.0.0.1:6379/0", "--k8s-catalog", catalog}
}

// The internal API answers only on its own listener and only to the secret;
// the public listener does not serve it at all. Metrics are likewise only
// on their own listener. Sandboxes run on this machine here: the test has
// no cluster, and only its binary links the local provider.
func TestInternalAPIListener(t *testing.T) {
	cfg, _, err := parseConfig([]string{
		"--data-dir", t.TempDir(), "--database-url", testdb.Postgres(t), "--redis-url", "redis://127.0.0.1:6379/0",
		"--activity-prefix", "sbxtest:cmdcontrol:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":", "--k8s-catalog", catalog,
		"--api-addr", "127.0.0.1:0", "--internal-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0",
		"--ssh-public-addr", "127.0.0.1:2222", "--no-idle-offload",
	}, secretEnv)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Provider = standalone.Local{}
	ctx, cancel := context.WithCancel(context.Background())
	svc, done := servicetest.Start(t, "control", func(ready func(*control.Service)) error { return run(ctx, cfg, ready) })
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	get := func(url, auth string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if svc.InternalURL() == "" || svc.InternalURL() == svc.URL() {
		t.Fatalf("internal URL %q must differ from the public %q", svc.InternalURL(), svc.URL())
	}
	for _, c := range []struct {
		name, url, auth string
		want            int
	}{
		{"internal with secret", svc.InternalURL() + edgeapi.PathHealth, secret, 200},
		{"internal without secret", svc.InternalURL() + edgeapi.PathHealth, "", 401},
		{"internal with an agent-like token", svc.InternalURL() + edgeapi.PathHealth, "sbx_agent_x", 401},
		{"public listener", svc.URL() + edgeapi.PathHealth, secret, 404},
		{"metrics on the public listener", svc.URL() + "/metrics", "", 404},
		{"metrics on their listener", "http://" + svc.MetricsAddr().String() + "/metrics", "", 200},
	} {
		if got := get(c.url, c.auth); got != c.want {
			t.Errorf("%s: GET %s = %d, want %d", c.name, c.url, got, c.want)
		}
	}
}

func TestConfigNeedsSecretForInternalAPI(t *testing.T) {
	t.Parallel()
	_, _, err := parseConfig(required(t), func(string) string { return "" })
	if err == nil || !strings.Contains(err.Error(), "InternalSecret") {
		t.Fatalf("parseConfig without a secret: %v, want an InternalSecret error", err)
	}
}

// A replica shares Postgres and Redis with the others: without either,
// control refuses to start, naming the flag. --no-idle-offload only turns
// the detector off.
func TestConfigNeedsPostgresAndRedis(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ drop, want string }{{"--database-url", "--database-url"}, {"--redis-url", "--redis-url"}} {
		var args []string
		for a := range slices.Chunk(required(t), 2) {
			if a[0] != c.drop {
				args = append(args, a...)
			}
		}
		if _, _, err := parseConfig(args, secretEnv); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseConfig without %s: %v; want an error naming it", c.drop, err)
		}
	}
	c, _, err := parseConfig(append(required(t), "--no-idle-offload"), secretEnv)
	if err != nil || !c.Lifecycle.NoIdleOffload {
		t.Fatalf("--no-idle-offload: %+v, %v; want offload off", c.Lifecycle, err)
	}
	if c.MetricsAddr != "127.0.0.1:9091" {
		t.Errorf("default metrics address %q, want loopback 127.0.0.1:9091", c.MetricsAddr)
	}
	c, _, err = parseConfig(required(t), secretEnv)
	if err != nil || c.Lifecycle.NoIdleOffload {
		t.Fatalf("default: %+v, %v; want offload on", c.Lifecycle, err)
	}
}

// TestConfigReconcileInterval: one minute by default, the variable or the
// flag sets it, and a value that is not a positive duration is refused
// with the flag's name.
func TestConfigReconcileInterval(t *testing.T) {
	t.Parallel()
	base := required(t)
	cases := []struct {
		name    string
		envVal  string
		args    []string
		want    time.Duration
		wantErr bool
	}{
		{name: "default", want: time.Minute},
		{name: "variable", envVal: "30s", want: 30 * time.Second},
		{name: "flag wins", envVal: "30s", args: []string{"--reconcile-interval", "5m"}, want: 5 * time.Minute},
		{name: "zero", args: []string{"--reconcile-interval", "0s"}, wantErr: true},
		{name: "not a duration", envVal: "often", wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := func(k string) string {
				if k == "SBX_RECONCILE_INTERVAL" {
					return tc.envVal
				}
				return secretEnv(k)
			}
			c, _, err := parseConfig(append(slices.Clone(base), tc.args...), env)
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), "--reconcile-interval") {
					t.Fatalf("env %q args %v: %v; want an error naming --reconcile-interval", tc.envVal, tc.args, err)
				}
				return
			}
			if err != nil || c.Lifecycle.ReconcileInterval != tc.want {
				t.Fatalf("env %q args %v: interval %s, %v; want %s", tc.envVal, tc.args, c.Lifecycle.ReconcileInterval, err, tc.want)
			}
		})
	}
}

// TestConfigStreamOrigins: --stream-origins (or SBX_STREAM_ORIGINS) is
// the list of origins besides the API's listener address that may open
// terminal streams.
func TestConfigStreamOrigins(t *testing.T) {
	t.Parallel()
	base := required(t)
	c, _, err := parseConfig(append(slices.Clone(base), "--stream-origins", "api.example.com, *.tools.example.com:8443,"), secretEnv)
	if err != nil || !slices.Equal(c.StreamOrigins, []string{"api.example.com", "*.tools.example.com:8443"}) {
		t.Fatalf("StreamOrigins %q, %v; want the two patterns", c.StreamOrigins, err)
	}
	if c, _, err = parseConfig(base, secretEnv); err != nil || c.StreamOrigins != nil {
		t.Fatalf("default StreamOrigins %q, %v; want none", c.StreamOrigins, err)
	}
}
