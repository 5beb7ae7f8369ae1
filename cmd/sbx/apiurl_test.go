package main

import (
	"strings"
	"testing"
)

// TestMalformedAPIURLIsAUsageError: an API URL without a scheme, or with
// another one, is a typo (exit 2) shown as typed, whether or not a token
// is at hand; not "cannot reach the API" (3) or "no API token" (4). A URL
// that may hold a password is not echoed.
func TestMalformedAPIURLIsAUsageError(t *testing.T) {
	for _, tc := range []struct {
		api, token, want string
	}{
		{"127.0.0.1:8080", "", `"127.0.0.1:8080"`},
		{"127.0.0.1:8080", fakeToken, `"127.0.0.1:8080"`},
		{"nonsense", fakeToken, "nonsense"},
		{"ftp://x", fakeToken, "ftp://x"},
		{"http://u:hunter2@[bad", "", "(unparsable)"},
	} {
		cliEnv(t, tc.api)
		t.Setenv("SBX_TOKEN", tc.token)
		code, _, stderr := runCLI(t, "", "list")
		if code != 2 || !strings.Contains(stderr, "the API URL "+tc.want+" ") || !strings.Contains(stderr, "http://127.0.0.1:8080") {
			t.Errorf("SBX_API=%s SBX_TOKEN=%q sbx list: exit %d, %q; want exit 2 naming %s and an example", tc.api, tc.token, code, stderr, tc.want)
		}
		if strings.Contains(stderr, "hunter2") {
			t.Errorf("SBX_API=%s: the password is in the error: %q", tc.api, stderr)
		}
	}
}
