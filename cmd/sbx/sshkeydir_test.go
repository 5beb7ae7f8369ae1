package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestSSHKeyMissingFolder: sbx ssh-key into a folder that is not there
// says so in words, and mints nothing (a credential nobody holds).
func TestSSHKeyMissingFolder(t *testing.T) {
	api, base := startFakeAPI(t, "")
	cliEnv(t, base)
	file := filepath.Join(t.TempDir(), "no-such-folder", "sbx.key")
	code, _, stderr := runCLI(t, "", "ssh-key", fakeID, file)
	if code != 1 || !strings.Contains(stderr, "the folder "+filepath.Dir(file)+" does not exist") || strings.Contains(stderr, ".tmp-") {
		t.Errorf("sbx ssh-key into a missing folder: exit %d, %q; want exit 1 naming the folder", code, stderr)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	for _, r := range api.reqs {
		if strings.HasSuffix(r.Path, "/ssh_tokens") {
			t.Errorf("a credential was minted (%s %s) for a key that could not be written", r.Method, r.Path)
		}
	}
}
