package mcpserver

import "testing"

func TestParseMessage(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       Message
	}{
		{"initialize", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","clientInfo":{"name":"claude-code","version":"2.1"}}}`,
			Message{Method: "initialize", ClientName: "claude-code", ClientVersion: "2.1"}},
		{"stateless _meta", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/clientInfo":{"name":"Cursor","version":"1"}},"name":"get_sandbox","arguments":{"sandbox_id":"sbx-1"}}}`,
			Message{Method: "tools/call", ClientName: "Cursor", ClientVersion: "1", SandboxID: "sbx-1"}},
		{"sandbox named outside a tool call", `{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"arguments":{"sandbox_id":"sbx-1"}}}`,
			Message{Method: "tools/list"}},
		{"a sandbox_id of the wrong type", `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"get_sandbox","arguments":{"sandbox_id":7}}}`,
			Message{Method: "tools/call"}},
		{"a batch", `[{"jsonrpc":"2.0","id":5,"method":"initialize","params":{"clientInfo":{"name":"x"}}}]`, Message{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.want.Size = len(tc.body)
			if got := parseMessage([]byte(tc.body)); got != tc.want {
				t.Errorf("parseMessage = %+v, want %+v", got, tc.want)
			}
		})
	}
}
