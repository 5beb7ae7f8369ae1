package egress

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sbxedge/sbx/internal/egresspolicy"
)

func basic(id, secret string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(id+":"+secret))
}

// connect sends a CONNECT for target through the proxy and returns its
// response and the connection (open when the answer is 200).
func connect(t testing.TB, proxy, target, auth string) (*http.Response, net.Conn, *bufio.Reader) {
	t.Helper()
	u, err := url.Parse(proxy)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	req := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n"
	if auth != "" {
		req += "Proxy-Authorization: " + auth + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	return resp, c, br
}

func body(t testing.TB, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestCredentialRequired(t *testing.T) {
	t.Parallel()
	r := newRig(t, mode(egresspolicy.Open), loopback)
	port := upstream(t)
	r.resolver.set("up.test", []string{"127.0.0.1"})
	target := fmt.Sprintf("up.test:%d", port)
	for name, auth := range map[string]string{
		"missing":       "",
		"wrong secret":  basic(sandboxID, "sbx_pc_wrong"),
		"other sandbox": basic("sbx-other", secret),
		"not basic":     "Bearer " + secret,
		"no secret":     basic(sandboxID, ""),
		"garbage":       "Basic !!!",
	} {
		resp, _, _ := connect(t, r.url, target, auth)
		if resp.StatusCode != http.StatusProxyAuthRequired {
			t.Errorf("%s: CONNECT answered %d, want 407", name, resp.StatusCode)
		}
		if !strings.HasPrefix(resp.Header.Get("Proxy-Authenticate"), "Basic") {
			t.Errorf("%s: 407 without a Basic Proxy-Authenticate: %q", name, resp.Header.Get("Proxy-Authenticate"))
		}
	}
	if d := r.dialer.calls(); len(d) != 0 {
		t.Errorf("unauthenticated requests dialed %v", d)
	}
	if n := r.resolver.count("up.test"); n != 0 {
		t.Errorf("unauthenticated requests resolved the name %d times", n)
	}
	if got := testutil.ToFloat64(r.gw.metrics.decisions.WithLabelValues("unauthenticated")); got != 6 {
		t.Errorf("unauthenticated count = %v, want 6", got)
	}
	if got := r.log.Recent(sandboxID, 0, 10); len(got) != 0 {
		t.Errorf("unauthenticated requests were logged for the sandbox: %+v", got)
	}
}

func TestConnectRelaysAndLogs(t *testing.T) {
	t.Parallel()
	r := newRig(t, allow("up.test"), loopback)
	port := upstream(t)
	r.resolver.set("up.test", []string{"127.0.0.1"})
	resp, c, br := connect(t, r.url, fmt.Sprintf("up.test:%d", port), basic(sandboxID, secret))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT answered %d: %s", resp.StatusCode, body(t, resp))
	}
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: up.test\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	inner, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := body(t, inner); got != "hello from upstream" {
		t.Fatalf("through the tunnel: %q", got)
	}
	c.Close()
	d := waitDecision(t, r.log, func(d Decision) bool { return d.Verdict == Allowed })
	if d.Host != "up.test" || d.Port != port || d.Addr != "127.0.0.1" || d.BytesUp == 0 || d.BytesDown < int64(len("hello from upstream")) {
		t.Errorf("decision = %+v, want up.test:%d via 127.0.0.1 with bytes both ways", d, port)
	}
	if got := testutil.ToFloat64(r.gw.metrics.decisions.WithLabelValues("allowed")); got != 1 {
		t.Errorf("allowed count = %v, want 1", got)
	}
}

// waitDecision waits for the newest decision that matches: an allowed
// one is recorded when its relay ends, just after the client sees it end.
func waitDecision(t *testing.T, l *MemoryLog, match func(Decision) bool) Decision {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, d := range l.Recent(sandboxID, 0, 100) {
			if match(d) {
				return d
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no matching decision in %+v", l.Recent(sandboxID, 0, 100))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAlwaysRefusedThroughGateway(t *testing.T) {
	t.Parallel()
	// An open policy and no trust: only the refused ranges stand
	// between the sandbox and these addresses, and the guard fails the
	// test if the gateway tries any of them.
	r := newRig(t, mode(egresspolicy.Open), egresspolicy.RangesConfig{
		Cluster: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")},
	})
	r.resolver.set("metadata.test", []string{"169.254.169.254"})
	r.resolver.set("private.test", []string{"10.0.0.7", "192.168.1.1"})
	r.resolver.set("mapped.test", []string{"::ffff:172.16.0.1"})
	r.resolver.set("cgnat.test", []string{"100.64.3.4"})
	r.resolver.set("loop.test", []string{"127.0.0.1"})
	r.resolver.set("cluster.test", []string{"198.18.0.10"})
	tests := []struct{ target, reason string }{
		{"169.254.169.254:80", "metadata"},
		{"metadata.test:80", "metadata.test resolves to 169.254.169.254 is the cloud metadata endpoint"},
		{"10.0.0.5:443", "RFC 1918"},
		{"172.16.0.1:443", "RFC 1918"},
		{"192.168.0.1:443", "RFC 1918"},
		{"private.test:443", "10.0.0.7 is a private address (RFC 1918)"},
		{"mapped.test:443", "RFC 1918"},
		{"100.64.0.1:443", "carrier-grade NAT"},
		{"cgnat.test:443", "carrier-grade NAT"},
		{"127.0.0.1:22", "loopback"},
		{"[::1]:22", "loopback"},
		{"loop.test:22", "loopback"},
		{"[fd00::1]:443", "unique local"},
		{"[fe80::1]:443", "link-local"},
		{"198.18.0.10:443", "cluster"},
		{"cluster.test:443", "cluster"},
		{"[::ffff:10.1.1.1]:443", "RFC 1918"},
	}
	for _, tt := range tests {
		resp, _, _ := connect(t, r.url, tt.target, basic(sandboxID, secret))
		b := body(t, resp)
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("CONNECT %s answered %d (%s), want 403", tt.target, resp.StatusCode, b)
			continue
		}
		h := resp.Header.Get(ReasonHeader)
		if !strings.Contains(h, tt.reason) || !strings.Contains(b, tt.reason) {
			t.Errorf("CONNECT %s: reason header %q, body %q; want both to say %q", tt.target, h, b, tt.reason)
		}
	}
	if d := r.dialer.calls(); len(d) != 0 {
		t.Errorf("dialed %v", d)
	}
	if got := testutil.ToFloat64(r.gw.metrics.decisions.WithLabelValues("denied")); got != float64(len(tests)) {
		t.Errorf("denied count = %v, want %d", got, len(tests))
	}
}

func TestDNSRebinding(t *testing.T) {
	t.Parallel()
	r := newRig(t, allow("rebind.test"), loopback)
	port := upstream(t)
	// Allowed (trusted loopback) on the first lookup, private after.
	r.resolver.set("rebind.test", []string{"127.0.0.1"}, []string{"10.0.0.9"})
	target := fmt.Sprintf("rebind.test:%d", port)
	resp, c, _ := connect(t, r.url, target, basic(sandboxID, secret))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("first CONNECT answered %d: %s", resp.StatusCode, body(t, resp))
	}
	c.Close()
	resp, _, _ = connect(t, r.url, target, basic(sandboxID, secret))
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(resp.Header.Get(ReasonHeader), "10.0.0.9") {
		t.Errorf("after rebinding: %d %q, want 403 naming 10.0.0.9", resp.StatusCode, resp.Header.Get(ReasonHeader))
	}
	// One lookup per request: the address checked is the address
	// dialed, never a second answer.
	if n := r.resolver.count("rebind.test"); n != 2 {
		t.Errorf("%d lookups for 2 requests, want 2", n)
	}
	want := fmt.Sprintf("127.0.0.1:%d", port)
	if d := r.dialer.calls(); len(d) != 1 || d[0] != want {
		t.Errorf("dialed %v, want only %s", d, want)
	}
}

func TestMixedAnswerDialsOnlyCheckedAddress(t *testing.T) {
	t.Parallel()
	r := newRig(t, mode(egresspolicy.Open), loopback)
	port := upstream(t)
	r.resolver.set("mixed.test", []string{"10.0.0.1", "169.254.169.254", "127.0.0.1"})
	resp, c, _ := connect(t, r.url, fmt.Sprintf("mixed.test:%d", port), basic(sandboxID, secret))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT answered %d: %s", resp.StatusCode, body(t, resp))
	}
	c.Close()
	want := fmt.Sprintf("127.0.0.1:%d", port)
	if d := r.dialer.calls(); len(d) != 1 || d[0] != want {
		t.Errorf("dialed %v, want only %s", d, want)
	}
}

func TestNoneRefusesEverything(t *testing.T) {
	t.Parallel()
	r := newRig(t, mode(egresspolicy.None), loopback)
	port := upstream(t)
	r.resolver.set("up.test", []string{"127.0.0.1"})
	for _, target := range []string{fmt.Sprintf("up.test:%d", port), fmt.Sprintf("127.0.0.1:%d", port), "github.com:443", "[::1]:443"} {
		resp, _, _ := connect(t, r.url, target, basic(sandboxID, secret))
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(resp.Header.Get(ReasonHeader), "allows no egress") {
			t.Errorf("CONNECT %s under none: %d %q, want 403 saying no egress", target, resp.StatusCode, resp.Header.Get(ReasonHeader))
		}
	}
	if n := r.resolver.count("up.test"); n != 0 {
		t.Errorf("none resolved a name %d times; a refusal by policy asks no DNS", n)
	}
	if d := r.dialer.calls(); len(d) != 0 {
		t.Errorf("none dialed %v", d)
	}
}

func TestOwnListenerRefusedInTrustedRange(t *testing.T) {
	t.Parallel()
	port := upstream(t)
	rc := loopback
	rc.Own = []netip.AddrPort{netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port)}
	r := newRig(t, mode(egresspolicy.Open), rc)
	resp, _, _ := connect(t, r.url, fmt.Sprintf("127.0.0.1:%d", port), basic(sandboxID, secret))
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(resp.Header.Get(ReasonHeader), "own listeners") {
		t.Errorf("CONNECT to an own listener: %d %q, want 403 naming it", resp.StatusCode, resp.Header.Get(ReasonHeader))
	}
	if d := r.dialer.calls(); len(d) != 0 {
		t.Errorf("dialed %v", d)
	}
}

func TestNotAProxyRequest(t *testing.T) {
	t.Parallel()
	r := newRig(t, mode(egresspolicy.Open), loopback)
	for _, tc := range []struct{ line string }{
		{"GET / HTTP/1.1"},
		{"GET https://example.com/ HTTP/1.1"},
		{"CONNECT example.com HTTP/1.1"},
		{"CONNECT example.com:0 HTTP/1.1"},
		{"CONNECT bad_host!:443 HTTP/1.1"},
	} {
		u, _ := url.Parse(r.url)
		c, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "%s\r\nHost: example.com\r\nProxy-Authorization: %s\r\n\r\n", tc.line, basic(sandboxID, secret))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		if err != nil {
			t.Fatalf("%s: %v", tc.line, err)
		}
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get(ReasonHeader) == "" {
			t.Errorf("%q: %d %q, want 400 with a reason", tc.line, resp.StatusCode, resp.Header.Get(ReasonHeader))
		}
	}
}

// echoServer accepts connections, holds each open and echoes it; it
// returns its port.
func echoServer(t *testing.T) uint16 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return netip.MustParseAddrPort(ln.Addr().String()).Port()
}

// openTunnel opens a CONNECT tunnel to name:port and checks it echoes.
func openTunnel(t *testing.T, r *rig, name string, port uint16) (net.Conn, *bufio.Reader) {
	t.Helper()
	resp, c, br := connect(t, r.url, fmt.Sprintf("%s:%d", name, port), basic(sandboxID, secret))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT %s answered %d", name, resp.StatusCode)
	}
	echo(t, c, br, "ping")
	return c, br
}

// wantClosed fails unless the tunnel ends within 5 s.
func wantClosed(t *testing.T, c net.Conn, br *bufio.Reader, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err == nil {
		t.Errorf("%s still reads", what)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Errorf("%s was not closed within 5 s", what)
	}
}

func TestPolicyChangeClosesTunnels(t *testing.T) {
	t.Parallel()
	r := newRig(t, allow("keep.test", "drop.test"), loopback)
	port := echoServer(t)
	r.resolver.set("keep.test", []string{"127.0.0.1"})
	r.resolver.set("drop.test", []string{"127.0.0.1"})
	keepC, keepR := openTunnel(t, r, "keep.test", port)
	dropC, dropR := openTunnel(t, r, "drop.test", port)

	p := allow("keep.test")
	r.sandboxes.setPolicy(sandboxID, p)
	if n := r.gw.PolicyChanged(sandboxID, p); n != 1 {
		t.Errorf("PolicyChanged closed %d tunnels, want 1", n)
	}
	wantClosed(t, dropC, dropR, "the dropped tunnel")
	echo(t, keepC, keepR, "still here")
	d := waitDecision(t, r.log, func(d Decision) bool { return d.Host == "drop.test" })
	if !strings.Contains(d.Reason, "policy change") || !strings.Contains(d.Reason, "not in this sandbox's allowlist") {
		t.Errorf("dropped tunnel's decision reason %q, want it to name the policy change", d.Reason)
	}
	// New connections follow the new policy.
	resp, _, _ := connect(t, r.url, fmt.Sprintf("drop.test:%d", port), basic(sandboxID, secret))
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("CONNECT drop.test after the change answered %d, want 403", resp.StatusCode)
	}
	r.gw.SandboxEnded(sandboxID)
	wantClosed(t, keepC, keepR, "a tunnel of an ended sandbox")
}

func echo(t *testing.T, c net.Conn, br *bufio.Reader, msg string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, msg+"\n"); err != nil {
		t.Fatal(err)
	}
	line, err := br.ReadString('\n')
	if err != nil || line != msg+"\n" {
		t.Fatalf("echo %q: got %q, %v", msg, line, err)
	}
}

// TestCurl drives the gateway with curl, as code in a sandbox would:
// plain HTTP in absolute form and HTTPS through CONNECT to a trusted
// loopback upstream, and refusals whose reason curl shows.
func TestCurl(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is required (apt-get install curl; .ci/run installs it)")
	}
	r := newRig(t, allow("up.test", "*.npmjs.org:443"), loopback)
	port := upstream(t)
	tlsUp := tlsUpstream(t)
	r.resolver.set("up.test", []string{"127.0.0.1"})
	u, _ := url.Parse(r.url)
	proxy := "http://" + sandboxID + ":" + secret + "@" + u.Host
	curl := func(args ...string) (string, error) {
		cmd := exec.Command("curl", append([]string{"-sS", "--max-time", "10", "-x", proxy}, args...)...)
		cmd.Env = []string{"PATH=/usr/bin:/bin"} // no proxy settings of the machine's
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := curl(fmt.Sprintf("http://up.test:%d/", port)); err != nil || out != "hello from upstream" {
		t.Errorf("curl http through the gateway: %q, %v", out, err)
	}
	if out, err := curl("-k", fmt.Sprintf("https://up.test:%d/", tlsUp)); err != nil || out != "hello over tls" {
		t.Errorf("curl https through the gateway: %q, %v", out, err)
	}
	const want = "is not in this sandbox's allowlist; allowed: up.test, *.npmjs.org:443"
	out, _ := curl(fmt.Sprintf("http://other.test:%d/", port))
	if !strings.Contains(out, "other.test:"+fmt.Sprint(port)+" "+want) {
		t.Errorf("curl http to a refused host printed %q, want the reason %q", out, want)
	}
	out, err := curl("-v", fmt.Sprintf("https://other.test:%d/", port))
	if err == nil || !strings.Contains(out, "403") || !strings.Contains(out, ReasonHeader+": other.test") || !strings.Contains(out, want) {
		t.Errorf("curl https to a refused host printed %q (%v), want a 403 with the reason", out, err)
	}
	if n := r.resolver.count("other.test"); n != 0 {
		t.Errorf("a refused name was resolved %d times", n)
	}
}
