package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
)

// AlertmanagerConfig is the subset of the Prometheus Operator's type the
// manifests use, decoded strictly like PrometheusRule.
type AlertmanagerConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   crMeta `json:"metadata"`
	Spec       struct {
		Route struct {
			Receiver string `json:"receiver"`
			Matchers []struct {
				Name      string `json:"name"`
				Value     string `json:"value"`
				MatchType string `json:"matchType"`
			} `json:"matchers"`
			GroupBy        []string `json:"groupBy"`
			GroupWait      string   `json:"groupWait"`
			GroupInterval  string   `json:"groupInterval"`
			RepeatInterval string   `json:"repeatInterval"`
		} `json:"route"`
		Receivers []struct {
			Name         string `json:"name"`
			SlackConfigs []struct {
				Channel      string `json:"channel"`
				SendResolved bool   `json:"sendResolved"`
				Title        string `json:"title"`
				Text         string `json:"text"`
				APIURL       struct {
					Name string `json:"name"`
					Key  string `json:"key"`
				} `json:"apiURL"`
			} `json:"slackConfigs"`
		} `json:"receivers"`
	} `json:"spec"`
}

// TestCapacityRules runs `promtool test rules` on the rendered
// PrometheusRules: testdata/capacity_rules_test.yaml feeds an hour of pool
// gauges and expects the spec's desired slots (the hour's p95 kept), the
// shortfall alert and its proposed host count.
func TestCapacityRules(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is required (apt-get install prometheus; .ci/run installs it)")
	}
	r := render(t, "base")
	type group = any
	var groups []group
	for _, pr := range r.rules {
		for _, g := range pr.Spec.Groups {
			groups = append(groups, g)
		}
	}
	b, err := yaml.Marshal(map[string]any{"groups": groups})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join("testdata", "capacity_rules_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "capacity_rules_test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "check", "rules", "rules.yaml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	cmd = exec.Command(promtool, "test", "rules", "capacity_rules_test.yaml")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// checkAlertRoute: every alert deploy/ defines reaches #ops on Slack: the
// route's matchers all hold for the alert's labels, and its receiver posts
// to #ops with the webhook URL from a Secret (never inline).
func checkAlertRoute(t *testing.T, r rendered) {
	t.Helper()
	if len(r.routes) != 1 {
		t.Fatalf("%d AlertmanagerConfigs, want 1", len(r.routes))
	}
	ac := r.routes[0]
	var slack bool
	for _, rc := range ac.Spec.Receivers {
		if rc.Name != ac.Spec.Route.Receiver {
			continue
		}
		for _, sc := range rc.SlackConfigs {
			if sc.Channel == "#ops" && sc.APIURL.Name != "" && sc.APIURL.Key != "" {
				slack = true
			}
		}
	}
	if !slack {
		t.Errorf("route receiver %q posts to no #ops Slack channel with a Secret webhook", ac.Spec.Route.Receiver)
	}
	for _, pr := range r.rules {
		for _, g := range pr.Spec.Groups {
			for _, rule := range g.Rules {
				if rule.Alert == "" {
					continue
				}
				for _, m := range ac.Spec.Route.Matchers {
					if m.MatchType != "=" {
						t.Errorf("route matcher %s uses %q; this check knows =", m.Name, m.MatchType)
						continue
					}
					if rule.Labels[m.Name] != m.Value {
						t.Errorf("alert %s has %s=%q; the #ops route wants %q", rule.Alert, m.Name, rule.Labels[m.Name], m.Value)
					}
				}
				if rule.Labels["namespace"] != ac.Metadata.Namespace {
					t.Errorf("alert %s has namespace=%q; the operator scopes the route to %q", rule.Alert, rule.Labels["namespace"], ac.Metadata.Namespace)
				}
			}
		}
	}
}
