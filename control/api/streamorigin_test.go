package api_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestStreamOriginIsNotTheHost (issue 27 L4): the terminal stream's Origin
// is compared with the API's own address and configured origins, never
// with the request's Host, which the sender chooses: Host and Origin both
// naming evil.example are refused even with a valid ticket, while a page
// on the API's own address still gets past the check.
func TestStreamOriginIsNotTheHost(t *testing.T) {
	e := newEnv(t, "sqlite", true)
	sb := e.createDev()
	ticket := func() string {
		var tk struct {
			Ticket string `json:"ticket"`
		}
		code, _, b := e.do("dev", "POST", "/api/v1/sandboxes/"+sb.ID+"/exec/stream/tickets", nil)
		if code != 201 || json.Unmarshal(b, &tk) != nil || tk.Ticket == "" {
			t.Fatalf("mint ticket: %d %s", code, b)
		}
		return tk.Ticket
	}
	own := strings.TrimPrefix(e.svc.URL(), "http://")
	_, port, _ := strings.Cut(own, ":")
	for _, c := range []struct {
		name, host, origin string
		wantOrigin         bool // the request gets past the Origin check
	}{
		{"Host and Origin both evil", "evil.example:8080", "http://evil.example:8080", false},
		{"Host and Origin both evil, on our port", "evil.example:" + port, "http://evil.example:" + port, false},
		{"our address", own, "http://" + own, true},
		{"localhost on our port", "localhost:" + port, "http://localhost:" + port, true},
		{"our address under another port", own, "http://127.0.0.1:1", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, err := http.NewRequest("GET", e.svc.URL()+"/api/v1/sandboxes/"+sb.ID+"/exec/stream?command=id&ticket="+url.QueryEscape(ticket()), nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = c.host
			req.Header.Set("Origin", c.origin)
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", "websocket")
			req.Header.Set("Sec-WebSocket-Version", "13")
			req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var p problemDoc
			_ = json.NewDecoder(resp.Body).Decode(&p)
			refused := resp.StatusCode == 403 && p.Code == "origin_not_allowed"
			if refused == c.wantOrigin || resp.StatusCode == http.StatusSwitchingProtocols && !c.wantOrigin {
				t.Fatalf("Host %s Origin %s: %d %s, want past the Origin check: %v", c.host, c.origin, resp.StatusCode, p.Code, c.wantOrigin)
			}
		})
	}
}
