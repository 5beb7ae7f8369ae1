package main

import (
	"bytes"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDevRefusesItsOwnPorts: local sandboxes share sbx dev's loopback,
// so a preview of one of sbx dev's own ports would publish sbx dev
// itself (its metrics name accounts). `sbx ports ID PORT --public` on
// its metrics or API port is refused, naming the listener; an ordinary
// port is exposed.
func TestDevRefusesItsOwnPorts(t *testing.T) {
	// The job queue off: the sandbox stays pending, a live state that may
	// expose ports, and no sandbox server is started.
	p := startDev(t, t.TempDir(), "", "--run-jobs=false")
	var sb sbView
	if code := p.call("POST", "/api/v1/sandboxes", map[string]any{}, &sb); code != 201 {
		t.Fatalf("create: %d", code)
	}
	port := func(base string) string {
		t.Helper()
		u, err := url.Parse(base)
		if err != nil || u.Port() == "" {
			t.Fatalf("port of %q: %v", base, err)
		}
		return u.Port()
	}
	for _, tc := range []struct {
		name, port, want string // want: in stderr when refused, "" when exposed
	}{
		{"metrics", port(p.Metrics), "is sbx dev's own metrics listener; a sandbox's server cannot be listening there"},
		{"REST API", port(p.API), "is sbx dev's own REST API"},
		{"ordinary", "3000", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(sbxBinary(t), "ports", sb.ID, tc.port, "--public")
			cmd.Env = append(os.Environ(), "SBX_API="+p.API, "SBX_TOKEN="+p.Token, "SBX_CONFIG_DIR="+filepath.Join(p.DataDir, "cli-config"))
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("sbx ports %s %s --public: %v\n%s%s, want a URL", sb.ID, tc.port, err, stdout.String(), stderr.String())
			case tc.want != "" && (err == nil || !strings.Contains(stderr.String(), tc.port+" "+tc.want)):
				t.Errorf("sbx ports %s %s --public: %v, stdout %q, stderr %q; want a refusal saying %q",
					sb.ID, tc.port, err, stdout.String(), stderr.String(), tc.port+" "+tc.want)
			}
		})
	}
}
