package connlog

import (
	"os"
	"strings"
	"testing"
)

func TestDetect(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    Signals
		want string
	}{
		{"nothing", Signals{}, ClientUnknown},
		{"plain OpenSSH", Signals{SSHVersion: "SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3"}, ClientOpenSSH},
		{"VS Code Remote-SSH", Signals{SSHVersion: "SSH-2.0-OpenSSH_9.6", Env: []string{"LANG", "VSCODE_AGENT_FOLDER"}}, ClientVSCode},
		{"Cursor sends VS Code's too", Signals{SSHVersion: "SSH-2.0-OpenSSH_9.6", Env: []string{"VSCODE_X", "CURSOR_TRACE_ID"}}, ClientCursor},
		{"JetBrains by version", Signals{SSHVersion: "SSH-2.0-JetBrains_SSH"}, ClientJetBrains},
		{"JetBrains by env", Signals{SSHVersion: "SSH-2.0-OpenSSH_9.6", Env: []string{"INTELLIJ_ENVIRONMENT_READER"}}, ClientJetBrains},
		{"sbx by SBX_CLIENT over OpenSSH", Signals{SSHVersion: "SSH-2.0-OpenSSH_9.6", Explicit: "sbx"}, ClientSbx},
		{"explicit wins over markers", Signals{Explicit: "My-Tool", Env: []string{"VSCODE_X"}}, "my-tool"},
		{"unusable explicit is ignored", Signals{Explicit: "no spaces allowed", SSHVersion: "SSH-2.0-PuTTY_Release_0.80"}, ClientPuTTY},
		{"other SSH", Signals{SSHVersion: "SSH-2.0-Go"}, ClientSSH},
		{"sbx version string", Signals{SSHVersion: SSHVersionPrefix + "/1.0"}, ClientSbx},
		{"Chromium", Signals{UserAgent: "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/120.0 Safari/537.36"}, ClientBrowser},
		{"curl", Signals{UserAgent: "curl/8.5.0"}, ClientCurl},
		{"Go", Signals{UserAgent: "Go-http-client/1.1"}, ClientHTTP},
		{"CLI by user agent", Signals{UserAgent: "sbx/1.2"}, ClientSbx},
		{"CLI by header over a Go user agent", Signals{UserAgent: "Go-http-client/1.1", Explicit: "sbx"}, ClientSbx},
		{"Claude Code", Signals{MCPClient: "claude-code"}, ClientClaude},
		{"VS Code's MCP", Signals{MCPClient: "Visual Studio Code"}, ClientVSCode},
		{"other MCP", Signals{MCPClient: "sbx-e2e"}, ClientMCP},
	} {
		if got := Detect(tc.s); got != tc.want {
			t.Errorf("%s: Detect(%+v) = %q, want %q", tc.name, tc.s, got, tc.want)
		}
	}
}

// TestREADMEListsTheRules keeps the README's table the one the code
// applies: every rule, in order.
func TestREADMEListsTheRules(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	at := 0
	for _, r := range Rules {
		client := "`" + r.Client + "`"
		if r.Client == Rules[0].Client {
			client = r.Client
		}
		row := "| " + client + " | " + r.From + " |"
		i := strings.Index(readme[at:], row)
		if i < 0 {
			t.Fatalf("README has no row %q after the previous rule's", row)
		}
		at += i + len(row)
	}
}
