package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sbxedge/sbx/control"
	"github.com/sbxedge/sbx/control/previewroute"
	"github.com/sbxedge/sbx/control/store"
)

type portView struct {
	Port       int    `json:"port"`
	URL        string `json:"url"`
	Access     string `json:"access"`
	HostPolicy string `json:"host_policy"`
}

func TestPorts(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			testPorts(t, backend)
		})
	}
}

func testPorts(t *testing.T, backend string) {
	e := newEnv(t, backend, true) // no jobs: the sandbox stays pending
	sb := e.createDev()
	path := "/api/v1/sandboxes/" + sb.ID + "/ports"
	expose := func(body string, want int) portView {
		t.Helper()
		code, _, b := e.do("dev", "POST", path, strings.NewReader(body), "Content-Type", "application/json")
		if code != want {
			t.Fatalf("POST %s %s: %d %s, want %d", path, body, code, b, want)
		}
		var v portView
		_ = json.Unmarshal(b, &v)
		return v
	}

	web := expose(`{"port":3000}`, 201)
	u, err := url.Parse(web.URL)
	if err != nil {
		t.Fatalf("url %q: %v", web.URL, err)
	}
	label, ok := strings.CutSuffix(u.Host, ".preview.test")
	if u.Scheme != "https" || !ok || !regexp.MustCompile(`^[a-z2-7]{20}$`).MatchString(label) {
		t.Fatalf("url %q: want https://<20 base32 chars>.preview.test", web.URL)
	}
	if strings.Contains(web.URL, strings.TrimPrefix(sb.ID, "sbx-")[:8]) {
		t.Errorf("url %q reveals the sandbox id %s", web.URL, sb.ID)
	}
	if web.Access != "private" || web.HostPolicy != "forward" {
		t.Errorf("defaults: access %q host_policy %q, want private forward", web.Access, web.HostPolicy)
	}
	// Again: same URL, new settings, 200.
	again := expose(`{"port":3000,"access":"public","host_policy":"localhost"}`, 200)
	if again.URL != web.URL || again.Access != "public" || again.HostPolicy != "localhost" {
		t.Errorf("re-expose: %+v, want url %s public localhost", again, web.URL)
	}
	// Asked again without settings (the CLI's `sbx ports ID 3000` to
	// print the URL): nothing changes. This once made it private.
	if same := expose(`{"port":3000}`, 200); same != again {
		t.Errorf("re-expose without settings: %+v, want it as it was: %+v", same, again)
	}
	// One setting: the other stays.
	if priv := expose(`{"port":3000,"access":"private"}`, 200); priv.Access != "private" || priv.HostPolicy != "localhost" || priv.URL != web.URL {
		t.Errorf("re-expose private: %+v, want private, localhost kept, url %s", priv, web.URL)
	}
	expose(`{"port":3000,"access":"public"}`, 200)
	other := expose(`{"port":8080}`, 201)
	if other.URL == web.URL {
		t.Error("two ports share a URL")
	}

	for _, tc := range []struct{ name, body, code string }{
		{"port 0", `{"port":0}`, "invalid_request"},
		{"port 65536", `{"port":65536}`, "invalid_request"},
		{"no port", `{}`, "invalid_request"},
		{"ssh port 22", `{"port":22}`, "invalid_request"},
		{"bad access", `{"port":3001,"access":"friends"}`, "invalid_request"},
		{"bad host policy", `{"port":3001,"host_policy":"any"}`, "invalid_request"},
		{"unknown field", `{"port":3001,"url":"http://x"}`, "malformed_json"},
	} {
		code, _, b := e.do("dev", "POST", path, strings.NewReader(tc.body), "Content-Type", "application/json")
		var p problemDoc
		_ = json.Unmarshal(b, &p)
		if code < 400 || code >= 500 || p.Code != tc.code {
			t.Errorf("%s: %d %s, want 4xx %s", tc.name, code, b, tc.code)
		}
	}
	// The sandbox's own sshd port, whatever its number (a Kubernetes
	// pod's is not 22): the 422 cmd/sbx's Kubernetes test drew when its
	// web port happened to be that number.
	ctx := context.Background()
	err = e.svc.Store.InTx(ctx, func(tx store.Tx) error {
		row, err := tx.SandboxForUpdate(ctx, sb.ID)
		if err != nil {
			return err
		}
		row.Endpoint = "10.1.2.3:2222"
		return tx.UpdateSandbox(ctx, row)
	})
	if err != nil {
		t.Fatal(err)
	}
	code, _, b := e.do("dev", "POST", path, strings.NewReader(`{"port":2222}`), "Content-Type", "application/json")
	var sshd problemDoc
	if _ = json.Unmarshal(b, &sshd); code != 422 || sshd.Code != "invalid_request" || !strings.Contains(string(b), "SSH server") {
		t.Errorf("the sandbox's sshd port 2222: %d %s, want 422 naming its SSH server", code, b)
	}
	// Another account sees no sandbox.
	if code, _, b := e.do("other", "POST", path, strings.NewReader(`{"port":3001}`), "Content-Type", "application/json"); code != 404 {
		t.Errorf("other account POST: %d %s, want 404", code, b)
	}
	if code, _, _ := e.do("other", "GET", path, nil); code != 404 {
		t.Errorf("other account GET: %d, want 404", code)
	}
	if code, _, _ := e.do("other", "DELETE", path+"/3000", nil); code != 404 {
		t.Errorf("other account DELETE: %d, want 404", code)
	}

	code, _, b = e.do("dev", "GET", path, nil)
	var list struct{ Ports []portView }
	_ = json.Unmarshal(b, &list)
	if code != 200 || len(list.Ports) != 2 || list.Ports[0].Port != 3000 || list.Ports[1].Port != 8080 {
		t.Fatalf("GET ports: %d %s, want 3000 and 8080", code, b)
	}

	res := previewroute.New(e.svc.Store, nil)
	rt, err := res.Resolve(t.Context(), label)
	if err != nil {
		t.Fatalf("Resolve(%s): %v", label, err)
	}
	if rt.SandboxID != sb.ID || rt.Port != 3000 || rt.Access != store.AccessPublic || rt.HostPolicy != store.HostLocalhost || rt.Addr != "" {
		t.Errorf("Resolve: %+v, want sandbox %s port 3000 public localhost, no address while pending", rt, sb.ID)
	}
	// Ready, it leads to the sandbox's server and its forwarder.
	err = e.svc.Store.InTx(ctx, func(tx store.Tx) error {
		row, err := tx.SandboxForUpdate(ctx, sb.ID)
		if err != nil {
			return err
		}
		row.State, row.ForwardEndpoint = store.StateReady, "10.1.2.3:2223"
		return tx.UpdateSandbox(ctx, row)
	})
	if err != nil {
		t.Fatal(err)
	}
	if rt, err := res.Resolve(t.Context(), label); err != nil || rt.Addr != "10.1.2.3:2222" || rt.ForwardAddr != "10.1.2.3:2223" {
		t.Errorf("Resolve once ready: %+v, %v; want addr 10.1.2.3:2222 and forward addr 10.1.2.3:2223", rt, err)
	}
	acct, err := res.TokenAccount(t.Context(), e.tokens["dev"])
	if err != nil || acct == "" {
		t.Errorf("TokenAccount(dev) = %q, %v", acct, err)
	}
	for _, name := range []string{"project", "nonsense"} {
		tok := e.tokens[name]
		if name == "nonsense" {
			tok = "sbx_at_" + strings.Repeat("A", 43)
		}
		if _, err := res.TokenAccount(t.Context(), tok); !errors.Is(err, previewroute.ErrBadToken) {
			t.Errorf("TokenAccount(%s): %v, want ErrBadToken", name, err)
		}
	}

	if code, _, b := e.do("dev", "DELETE", path+"/3000", nil); code != 204 {
		t.Fatalf("DELETE: %d %s", code, b)
	}
	if _, err := res.Resolve(t.Context(), label); !errors.Is(err, previewroute.ErrUnknownHost) {
		t.Errorf("Resolve after DELETE: %v, want ErrUnknownHost", err)
	}
	for _, p := range []string{"3000", "99999", "x"} {
		code, _, b := e.do("dev", "DELETE", path+"/"+p, nil)
		var pd problemDoc
		_ = json.Unmarshal(b, &pd)
		if code != 404 || pd.Code != "port_not_found" {
			t.Errorf("DELETE %s: %d %s, want 404 port_not_found", p, code, b)
		}
	}
	// Deleting the sandbox ends its previews: the label answers that its
	// sandbox ended (the edge's 410 page), no longer a route.
	if code, _, b := e.do("dev", "DELETE", "/api/v1/sandboxes/"+sb.ID, nil); code >= 300 {
		t.Fatalf("delete sandbox: %d %s", code, b)
	}
	otherLabel := strings.TrimSuffix(strings.TrimPrefix(other.URL, "https://"), ".preview.test")
	if _, err := res.Resolve(t.Context(), otherLabel); !errors.Is(err, previewroute.ErrEnded) {
		t.Errorf("Resolve after the sandbox was deleted: %v, want ErrEnded", err)
	}
}

// TestReservedPorts: a port the host serves itself on the network its
// sandboxes share (sbx dev's loopback) is refused with what serves it,
// control's own listeners included once bound at random, while ordinary
// ports are exposed and the sandbox's sshd and forwarder stay refused.
func TestReservedPorts(t *testing.T) {
	e := newEnv(t, "sqlite", true, func(c *control.Config) {
		c.InternalAddr, c.InternalSecret = "127.0.0.1:0", strings.Repeat("s", 32)
		c.ReservedPorts = map[int]string{4022: "sbx dev's own SSH broker"}
		c.ReserveOwnPorts = "sbx dev"
	})
	sb := e.createDev()
	ctx := context.Background()
	err := e.svc.Store.InTx(ctx, func(tx store.Tx) error {
		row, err := tx.SandboxForUpdate(ctx, sb.ID)
		if err != nil {
			return err
		}
		row.Endpoint, row.ForwardEndpoint = "127.0.0.1:41022", "127.0.0.1:41023"
		return tx.UpdateSandbox(ctx, row)
	})
	if err != nil {
		t.Fatal(err)
	}
	port := func(addr string) int {
		t.Helper()
		_, p, err := net.SplitHostPort(strings.TrimPrefix(addr, "http://"))
		if err != nil {
			t.Fatalf("port of %q: %v", addr, err)
		}
		n, _ := strconv.Atoi(p)
		return n
	}
	path := "/api/v1/sandboxes/" + sb.ID + "/ports"
	for _, tc := range []struct {
		name   string
		port   int
		status int
		detail string // in the problem's detail when refused
	}{
		{"ordinary port", 3000, 201, ""},
		{"reserved by the config", 4022, 422, "port: 4022 is sbx dev's own SSH broker; a sandbox's server cannot be listening there"},
		{"control's REST API", port(e.svc.URL()), 422, "sbx dev's own REST API"},
		{"control's metrics", port(e.svc.MetricsAddr().String()), 422, "sbx dev's own metrics listener"},
		{"control's internal API", port(e.svc.InternalURL()), 422, "sbx dev's own internal API"},
		{"sandbox's sshd", 41022, 422, "port: 41022 is the sandbox's SSH server"},
		{"sshd's usual port", 22, 422, "port: 22 is the sandbox's SSH server"},
		{"sandbox's forwarder", 41023, 422, "port: 41023 is the sandbox's port forwarder"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := fmt.Sprintf(`{"port":%d,"access":"public"}`, tc.port)
			code, _, b := e.do("dev", "POST", path, strings.NewReader(body), "Content-Type", "application/json")
			var p problemDoc
			_ = json.Unmarshal(b, &p)
			if code != tc.status || tc.status == 422 && (p.Code != "invalid_request" || !strings.Contains(p.Detail, tc.detail)) {
				t.Errorf("POST %s: %d %s, want %d invalid_request naming %q", body, code, b, tc.status, tc.detail)
			}
		})
	}
}
