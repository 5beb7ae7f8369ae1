package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// standaloneAM is the part of alertmanager/alertmanager.yml the checks
// below read; amtool validates the whole file.
type standaloneAM struct {
	Global struct {
		SlackAPIURL     string `json:"slack_api_url"`
		SlackAPIURLFile string `json:"slack_api_url_file"`
	} `json:"global"`
	Route struct {
		Receiver string `json:"receiver"`
		Routes   []struct {
			Receiver       string   `json:"receiver"`
			Matchers       []string `json:"matchers"`
			GroupBy        []string `json:"group_by"`
			GroupWait      string   `json:"group_wait"`
			GroupInterval  string   `json:"group_interval"`
			RepeatInterval string   `json:"repeat_interval"`
		} `json:"routes"`
	} `json:"route"`
	Receivers []struct {
		Name         string `json:"name"`
		SlackConfigs []struct {
			Channel    string `json:"channel"`
			APIURL     string `json:"api_url"`
			APIURLFile string `json:"api_url_file"`
			Text       string `json:"text"`
		} `json:"slack_configs"`
	} `json:"receivers"`
}

// TestStandaloneAlertmanager: the Alertmanager configuration for hosts
// without the Prometheus Operator (the tart provider's Mac minis) passes
// `amtool check-config`, routes team=ops to #ops on Slack with the
// webhook URL read from a file, never inline, and matches the operator's
// route (base/alertmanagerconfig.yaml) in grouping and timing, so both
// deployments page the same way.
func TestStandaloneAlertmanager(t *testing.T) {
	t.Parallel()
	path := filepath.Join("alertmanager", "alertmanager.yml")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "hooks.slack.com") {
		t.Fatalf("%s holds a Slack webhook URL; it belongs in the secret file", path)
	}
	var am standaloneAM
	if err := yaml.Unmarshal(b, &am); err != nil {
		t.Fatal(err)
	}
	if am.Global.SlackAPIURL != "" || am.Global.SlackAPIURLFile == "" {
		t.Errorf("global: slack_api_url %q, slack_api_url_file %q; want only the file", am.Global.SlackAPIURL, am.Global.SlackAPIURLFile)
	}
	op := render(t, "base").routes[0].Spec.Route
	var routed bool
	for _, r := range am.Route.Routes {
		if !slices.Contains(r.Matchers, `team = "ops"`) {
			continue
		}
		routed = true
		if !slices.Equal(r.GroupBy, op.GroupBy) || r.GroupWait != op.GroupWait || r.GroupInterval != op.GroupInterval || r.RepeatInterval != op.RepeatInterval {
			t.Errorf("ops route groups by %v every %s/%s/%s; the operator's route: %v %s/%s/%s",
				r.GroupBy, r.GroupWait, r.GroupInterval, r.RepeatInterval, op.GroupBy, op.GroupWait, op.GroupInterval, op.RepeatInterval)
		}
		for _, rc := range am.Receivers {
			if rc.Name != r.Receiver {
				continue
			}
			if len(rc.SlackConfigs) != 1 || rc.SlackConfigs[0].Channel != "#ops" || rc.SlackConfigs[0].APIURL != "" {
				t.Errorf("receiver %s: %+v; want one Slack config for #ops with no inline URL", rc.Name, rc.SlackConfigs)
				continue
			}
			for _, a := range []string{"shortfall", "p95", "proposed_hosts"} {
				if !strings.Contains(rc.SlackConfigs[0].Text, ".Annotations."+a) {
					t.Errorf("the #ops message does not carry the %s annotation", a)
				}
			}
		}
	}
	if !routed {
		t.Errorf("no route matches team = \"ops\"")
	}

	amtool, err := exec.LookPath("amtool")
	if err != nil {
		t.Fatal("amtool is required (apt-get install prometheus-alertmanager; .ci/run installs it)")
	}
	// amtool opens the secret file: give it one in a copy whose path
	// points there.
	dir := t.TempDir()
	secret := filepath.Join(dir, "slack-ops-webhook-url")
	if err := os.WriteFile(secret, []byte("https://slack.invalid/services/T0/B0/test\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := strings.ReplaceAll(string(b), am.Global.SlackAPIURLFile, secret)
	if err := os.WriteFile(filepath.Join(dir, "alertmanager.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(amtool, "check-config", filepath.Join(dir, "alertmanager.yml")).CombinedOutput()
	if err != nil {
		t.Fatalf("amtool check-config: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
