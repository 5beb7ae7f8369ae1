package connlog

import (
	"strings"
)

// Client kinds the rules name. An explicit statement (SBX_CLIENT, the
// Sbx-Client header) may name any other token.
const (
	ClientSbx       = "sbx"       // the sbx CLI (and its MCP server)
	ClientVSCode    = "vscode"    // VS Code Remote-SSH
	ClientCursor    = "cursor"    // Cursor's Remote-SSH
	ClientJetBrains = "jetbrains" // JetBrains Gateway and IDE backends
	ClientOpenSSH   = "openssh"
	ClientPuTTY     = "putty"
	ClientSSH       = "ssh"     // any other SSH client
	ClientBrowser   = "browser" // a browser by its user agent
	ClientCurl      = "curl"
	ClientHTTP      = "http"    // any other HTTP client
	ClientClaude    = "claude"  // Claude Code / Claude Desktop over MCP
	ClientMCP       = "mcp"     // any other MCP client
	ClientUnknown   = "unknown" // nothing said
)

// EnvClient is the environment variable an SSH client sets (SendEnv or
// SetEnv) to state its kind; HeaderClient is the HTTP header that does
// the same on the API and previews.
const (
	EnvClient    = "SBX_CLIENT"
	HeaderClient = "Sbx-Client"
)

// SSHVersionPrefix starts the SSH version string of clients built on
// x/crypto/ssh by this project; the CLI's own SSH client uses it.
const SSHVersionPrefix = "SSH-2.0-sbx"

// Signals are what a client has told us so far.
type Signals struct {
	// Explicit is SBX_CLIENT or the Sbx-Client header.
	Explicit string
	// SSHVersion is the client's SSH identification string.
	SSHVersion string
	// Env holds the names of the environment variables an SSH client
	// sent (values are not needed and never kept).
	Env []string
	// UserAgent is an HTTP client's User-Agent.
	UserAgent string
	// MCPClient is the MCP initialize request's clientInfo.name.
	MCPClient string
}

// Rule is one line of the table: the first rule whose Match holds names
// the client. The README's table is this one, in this order.
type Rule struct {
	Client string
	// From says what the rule reads, for the documentation.
	From  string
	Match func(Signals) bool
}

// Rules is the table Detect applies, in order. Explicit statements win;
// then the IDE markers (Cursor before VS Code, since Cursor is a VS Code
// fork and may send both), then version strings, user agents and MCP
// client names.
var Rules = []Rule{
	{"(the value)", "SBX_CLIENT env over SSH, Sbx-Client header over HTTP", func(s Signals) bool { return Explicit(s.Explicit) != "" }},
	{ClientCursor, "an env var named CURSOR_*", envPrefix("CURSOR_")},
	{ClientVSCode, "an env var named VSCODE_*", envPrefix("VSCODE_")},
	{ClientJetBrains, "an env var named JETBRAINS_* or INTELLIJ_*, or an SSH version containing \"jetbrains\"", func(s Signals) bool {
		return envPrefix("JETBRAINS_")(s) || envPrefix("INTELLIJ_")(s) || strings.Contains(strings.ToLower(s.SSHVersion), "jetbrains")
	}},
	{ClientSbx, "SSH version starting SSH-2.0-sbx, user agent starting sbx/, MCP clientInfo sbx", func(s Signals) bool {
		return strings.HasPrefix(s.SSHVersion, SSHVersionPrefix) || strings.HasPrefix(s.UserAgent, "sbx/") || strings.EqualFold(s.MCPClient, "sbx")
	}},
	{ClientOpenSSH, "SSH version starting SSH-2.0-OpenSSH", func(s Signals) bool { return strings.HasPrefix(s.SSHVersion, "SSH-2.0-OpenSSH") }},
	{ClientPuTTY, "SSH version containing PuTTY", func(s Signals) bool { return strings.Contains(s.SSHVersion, "PuTTY") }},
	{ClientSSH, "any other SSH version", func(s Signals) bool { return s.SSHVersion != "" }},
	{ClientCursor, "MCP clientInfo containing \"cursor\"", mcpContains("cursor")},
	{ClientVSCode, "MCP clientInfo containing \"visual studio code\" or \"vscode\"", func(s Signals) bool {
		return mcpContains("visual studio code")(s) || mcpContains("vscode")(s)
	}},
	{ClientClaude, "MCP clientInfo containing \"claude\"", mcpContains("claude")},
	{ClientMCP, "any other MCP clientInfo", func(s Signals) bool { return s.MCPClient != "" }},
	{ClientBrowser, "user agent starting Mozilla/", func(s Signals) bool { return strings.HasPrefix(s.UserAgent, "Mozilla/") }},
	{ClientCurl, "user agent starting curl/", func(s Signals) bool { return strings.HasPrefix(s.UserAgent, "curl/") }},
	{ClientHTTP, "any other user agent", func(s Signals) bool { return s.UserAgent != "" }},
}

// Detect names the client from its signals by the first matching rule.
func Detect(s Signals) string {
	if k := Explicit(s.Explicit); k != "" {
		return k
	}
	for _, r := range Rules[1:] {
		if r.Match(s) {
			return r.Client
		}
	}
	return ClientUnknown
}

// Explicit is a client's own statement of its kind, normalised: lower
// case, at most 32 bytes of [a-z0-9._-]; "" when it says nothing usable.
// A client may name any kind, so the value is bounded, not trusted: it
// labels the log, never a metric.
func Explicit(v string) string {
	v = strings.ToLower(strings.TrimSpace(v))
	if v == "" || len(v) > 32 {
		return ""
	}
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return ""
		}
	}
	return v
}

func envPrefix(p string) func(Signals) bool {
	return func(s Signals) bool {
		for _, e := range s.Env {
			if strings.HasPrefix(e, p) {
				return true
			}
		}
		return false
	}
}

func mcpContains(sub string) func(Signals) bool {
	return func(s Signals) bool { return strings.Contains(strings.ToLower(s.MCPClient), sub) }
}
