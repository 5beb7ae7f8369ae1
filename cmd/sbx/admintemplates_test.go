package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbxedge/sbx/control/devseed"
	"github.com/sbxedge/sbx/control/provider/tart"
)

// TestAdminTemplates runs `sbx admin templates` as its own process on sbx
// dev's tart (the fake): a list says which profile builds a template and
// which are builds; prune deletes only the old one; mistakes are usage
// errors (exit 2) that say what to give.
func TestAdminTemplates(t *testing.T) {
	t.Parallel()
	tartBin := fakeTartBinary(t)
	env := append(os.Environ(), "TART_HOME="+t.TempDir(), "FAKETART_PULL_DELAY=10ms", "FAKETART_CLONE_DELAY=10ms")
	sbx := func(args ...string) (string, string, int) {
		cmd := exec.Command(sbxBinary(t), append([]string{"admin", "templates"}, args...)...)
		cmd.Env = env
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), errb.String(), code
	}
	profile := devseed.MacOSProfiles[0].Name
	cur := tart.TemplateName(devseed.MacOSTemplates[profile])
	for _, name := range []string{cur, "sbxtpl-00000000000000aa", "sbxtpl-00000000000000bb-build"} {
		cmd := exec.Command(tartBin, "clone", "ghcr.io/cirruslabs/macos-sequoia-base:latest", name)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("tart clone %s: %v\n%s", name, err, out)
		}
	}
	out, errOut, code := sbx("list", "--tart", tartBin, "-o", "json")
	var list []tart.TemplateInfo
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list) != 3 {
		t.Fatalf("list -o json: exit %d %q %s", code, out, errOut)
	}
	for _, tpl := range list {
		if tpl.Name == cur && (!tpl.Current || tpl.Profiles[0] != profile || tpl.BaseImage == "") {
			t.Errorf("%+v: want it in use by %s", tpl, profile)
		}
	}
	if out, _, _ := sbx("list", "--tart", tartBin); !strings.Contains(out, "IN_USE") || !strings.Contains(out, "building") {
		t.Errorf("list table:\n%s", out)
	}
	if out, errOut, code := sbx("prune", "--tart", tartBin); code != 0 || strings.TrimSpace(out) != "deleted local/sbxtpl-00000000000000aa" {
		t.Fatalf("prune: exit %d %q %s", code, out, errOut)
	}
	if out, _, code := sbx("prune", "--tart", tartBin, "-o", "json"); code != 0 || strings.TrimSpace(out) != `{
  "deleted": []
}` {
		t.Errorf("second prune -o json: exit %d %q", code, out)
	}
	hosts := filepath.Join(t.TempDir(), "hosts.yaml")
	if err := os.WriteFile(hosts, []byte("hosts:\n  - name: mini-1\n    agent: http://127.0.0.1:1\n    slots: 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"lst", "--tart", tartBin}, 2, `unknown command "templates lst"`},
		{[]string{"list"}, 2, "--macos-hosts FILE"},
		{[]string{"list", "--tart", tartBin, "--macos-hosts", hosts}, 2, "not both"},
		{[]string{"list", "--macos-hosts", hosts}, 2, "Apple's licence allows 1 to 2"},
		{[]string{"list", "--macos-hosts", hosts + ".missing"}, 1, "no such file"},
	} {
		if _, errOut, code := sbx(tc.args...); code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("templates %v: exit %d %q; want %d and %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
}
