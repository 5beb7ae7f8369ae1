package preview_test

import (
	"net"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/auth/sshca"
)

// TestForwarderRoad: a route with a forwarder address is served through
// the forwarder alone (its sshd address leads nowhere here); a sandbox
// whose forwarder address has nothing listening (an image without one)
// is served over SSH; and a forwarder that cannot prove the pinned host
// key gets no request.
func TestForwarderRoad(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newTestApp())
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close() // nothing listens at the sshd address the route names

	e.expose("fwd", "sbx-a", "acct-a", false, false)
	rt, _ := e.res.Resolve(t.Context(), "fwd")
	rt.Target.Addr, rt.Target.ForwardAddr = deadAddr, e.forward
	e.res.set("fwd", rt)
	for i := range 3 {
		resp, body := e.get("fwd", "/hello", "Authorization", "Bearer "+tokenA)
		if resp.StatusCode != 200 {
			t.Fatalf("request %d over the forwarder with no sshd: %d %q", i, resp.StatusCode, body)
		}
	}

	// No forwarder listening: the SSH road.
	e.expose("noforwarder", "sbx-a", "acct-a", false, false)
	rt, _ = e.res.Resolve(t.Context(), "noforwarder")
	rt.Target.ForwardAddr = deadAddr
	e.res.set("noforwarder", rt)
	if resp, body := e.get("noforwarder", "/hello", "Authorization", "Bearer "+tokenA); resp.StatusCode != 200 {
		t.Fatalf("sandbox without a forwarder: %d %q, want 200 over SSH", resp.StatusCode, body)
	}

	// Another sandbox's forwarder at the address (its host key is not
	// the pinned one): refused before any request reaches an app.
	_, other, err := sshca.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	e.expose("imposter", "sbx-b", "acct-a", false, false)
	rt, _ = e.res.Resolve(t.Context(), "imposter")
	rt.Target.ForwardAddr = e.forward
	rt.Target.HostKey = strings.TrimSpace(string(ssh.MarshalAuthorizedKey(other.PublicKey())))
	e.res.set("imposter", rt)
	before := e.upstream.n.Load()
	resp, body := e.get("imposter", "/secret", "Authorization", "Bearer "+tokenA)
	if resp.StatusCode != 502 {
		t.Fatalf("forwarder with another host key: %d %q, want 502", resp.StatusCode, body)
	}
	if n := e.upstream.n.Load(); n != before {
		t.Fatalf("the app saw %d requests through a forwarder that failed the pin", n-before)
	}
}
