package main

import (
	"strings"
	"testing"
)

// TestUnknownCommandSuggestsByMeaning: the words people try from other
// tools suggest the sbx command that does it, not only one spelled alike
// ("logs" used to suggest only login).
func TestUnknownCommandSuggestsByMeaning(t *testing.T) {
	cliEnv(t, "http://127.0.0.1:1")
	for typed, want := range map[string]string{
		"logs": "services", "remove": "destroy", "run": "exec", "shell": "ssh",
		"ps": "list", "cp": "files", "open": "ports", "status": "get",
	} {
		code, _, stderr := runCLI(t, "", typed)
		if code != 2 || !strings.Contains(stderr, "did you mean") || !strings.Contains(stderr, want) {
			t.Errorf("sbx %s: exit %d, %q; want exit 2 suggesting %s", typed, code, stderr, want)
		}
	}
}
