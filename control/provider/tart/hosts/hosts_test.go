package hosts

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoad: defaults (2 slots), paths relative to the file, JSON as well
// as YAML, and a token read from its file only.
func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("tok", "agent-token-0123456789abcdef\n")
	f, err := Load(write("h.json", `{"hosts":[{"name":"mini-1","agent":"http://10.0.0.5:7443","tokenFile":"tok"},{"name":"mini-2","agent":"http://127.0.0.1:7443","slots":1}],"templates":{"p":{"baseImage":"img"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if h := f.Hosts[0]; h.Slots != 2 || h.TokenFile != filepath.Join(dir, "tok") || !h.Insecure() {
		t.Errorf("host %+v; want 2 slots, tokenFile beside the file, insecure (plain HTTP off loopback)", h)
	}
	if f.Hosts[1].Insecure() || f.Hosts[1].Slots != 1 {
		t.Errorf("host %+v: loopback is not insecure; slots 1 kept", f.Hosts[1])
	}
	cfg, err := f.Config("control-internal-secret-0123", nil)
	if err != nil || len(cfg.Hosts) != 2 || cfg.Templates["p"].BaseImage != "img" {
		t.Fatalf("Config = %+v, %v", cfg, err)
	}
	c0, _ := f.Hosts[0].Client("control-internal-secret-0123")
	c1, _ := f.Hosts[1].Client("control-internal-secret-0123")
	if c0.Token != "agent-token-0123456789abcdef" || c1.Token != "control-internal-secret-0123" {
		t.Errorf("tokens %q %q; want the file's, then control's secret", c0.Token, c1.Token)
	}
	if _, err := f.Hosts[1].Client("short"); err == nil || !strings.Contains(err.Error(), "16 characters") {
		t.Errorf("short token: %v", err)
	}
	if _, err := Load(write("t.yaml", "hosts:\n  - name: a\n    agent: http://a:1\ntemplates:\n  p: {setupScript: x}\n")); err == nil || !strings.Contains(err.Error(), "templates.p.baseImage") {
		t.Errorf("template without a base: %v", err)
	}
	if _, err := Load(write("e.yaml", "hosts: []\n")); err == nil || !strings.Contains(err.Error(), "at least one") {
		t.Errorf("no hosts: %v", err)
	}
}
