package preview_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// wire writes raw bytes, exactly as given, to the proxy on one connection
// and returns every answer it reads, in order, as "<status> <body>",
// until the proxy closes or goes quiet.
func (e *env) wire(raw string) []string {
	e.t.Helper()
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		e.t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		e.t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var answers []string
	for {
		// Most cases end with Connection: close or a 400 that closes;
		// a keep-alive connection ends the read when it goes quiet.
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			var ne net.Error
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !(errors.As(err, &ne) && ne.Timeout()) {
				e.t.Logf("reading answer %d: %v", len(answers)+1, err)
			}
			return answers
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answers = append(answers, strconv.Itoa(resp.StatusCode)+" "+string(b))
	}
}

// crlf joins header lines with CRLF and ends the head.
func crlf(lines ...string) string { return strings.Join(lines, "\r\n") + "\r\n\r\n" }

// TestWireAttacks is the attack table for the preview proxy on raw
// sockets: request smuggling, Host games and headers a client must not
// get past the proxy. Each case says what the client is answered and
// exactly what the sandbox's server receives.
func TestWireAttacks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newTestApp())
	e.expose("siteaa", "sbx-a", "acct-a", false, false)
	e.expose("sitebb", "sbx-b", "acct-b", false, false)
	port := strconv.Itoa(e.port())
	a, b := "siteaa."+domain, "sitebb."+domain
	auth := "Authorization: Bearer " + tokenA
	const sumABCD = "88d4266fd4e6338d13b845fcf289579d209c897823b9217da3e161936f031589" // SHA-256 of "abcd"

	// upstreamSaw checks what reached the sandbox: the paths in order, and
	// for the last one, check.
	type check func(r *http.Request, answers []string) string
	noHeader := func(names ...string) check {
		return func(r *http.Request, answers []string) string {
			for _, n := range names {
				if v, ok := r.Header[n]; ok {
					return fmt.Sprintf("header %s reached the sandbox: %q", n, v)
				}
			}
			return ""
		}
	}
	header := func(name, want string) check {
		return func(r *http.Request, answers []string) string {
			if got := strings.Join(r.Header.Values(name), ","); got != want {
				return fmt.Sprintf("%s %q, want %q", name, got, want)
			}
			return ""
		}
	}
	// answer checks the body of the client's first answer (an /upload
	// answers with the size and SHA-256 of the body the sandbox read).
	answer := func(prefix string) check {
		return func(_ *http.Request, answers []string) string {
			if len(answers) == 0 || !strings.HasPrefix(answers[0], prefix) {
				return fmt.Sprintf("first answer %q, want %q", answers, prefix)
			}
			return ""
		}
	}
	all := func(cs ...check) check {
		return func(r *http.Request, answers []string) string {
			for _, c := range cs {
				if s := c(r, answers); s != "" {
					return s
				}
			}
			return ""
		}
	}

	for i, tc := range []struct {
		name string
		raw  string
		// answers are the status codes the client reads, in order.
		answers []string
		// upstream are the request paths the sandbox sees, in order.
		upstream []string
		check    check
	}{
		// Smuggling. Go's server frames every request once; the proxy
		// frames it afresh upstream, so a disagreement can only split
		// the client's own bytes into its own requests, each authorised
		// on its own.
		// A request with both Content-Length and Transfer-Encoding is
		// framed by its chunked coding and its connection is closed once
		// answered (RFC 9112 6.1): the tail is never read as a request.
		{"CL+TE: chunked wins, and the connection ends after the answer",
			crlf("POST /upload HTTP/1.1", "Host: "+a, auth, "Content-Length: 4", "Transfer-Encoding: chunked") + "0\r\n\r\n" +
				crlf("GET /smuggled HTTP/1.1", "Host: "+a, auth, "Connection: close"),
			[]string{"200"}, []string{"/upload"}, answer("200 0 e3b0c442")},
		{"TE+CL, other order",
			crlf("POST /upload HTTP/1.1", "Host: "+a, auth, "Transfer-Encoding: chunked", "Content-Length: 40") + "0\r\n\r\n" +
				crlf("GET /smuggled HTTP/1.1", "Host: "+a, auth, "Connection: close"),
			[]string{"200"}, []string{"/upload"}, nil},
		{"two different Content-Lengths",
			crlf("POST /upload HTTP/1.1", "Host: "+a, auth, "Content-Length: 4", "Content-Length: 40", "Connection: close") + "abcd",
			[]string{"400"}, nil, nil},
		{"two equal Content-Lengths count once",
			crlf("POST /upload HTTP/1.1", "Host: "+a, auth, "Content-Length: 4", "Content-Length: 4", "Connection: close") + "abcd",
			[]string{"200"}, []string{"/upload"}, answer("200 4 " + sumABCD)},
		{"Content-Length list",
			crlf("POST /upload HTTP/1.1", "Host: "+a, auth, "Content-Length: 4, 4", "Connection: close") + "abcd",
			[]string{"400"}, nil, nil},
		{"signed Content-Length",
			crlf("POST /upload HTTP/1.1", "Host: "+a, auth, "Content-Length: +4", "Connection: close") + "abcd",
			[]string{"400"}, nil, nil},
		{"negative Content-Length",
			crlf("POST /upload HTTP/1.1", "Host: "+a, auth, "Content-Length: -1", "Connection: close") + "abcd",
			[]string{"400"}, nil, nil},
		{"Transfer-Encoding other than chunked",
			crlf("POST /upload HTTP/1.1", "Host: "+a, auth, "Transfer-Encoding: xchunked", "Connection: close") + "0\r\n\r\n",
			[]string{"501"}, nil, nil},
		{"Transfer-Encoding chunked, identity",
			crlf("POST /upload HTTP/1.1", "Host: "+a, auth, "Transfer-Encoding: chunked, identity", "Connection: close") + "0\r\n\r\n",
			[]string{"501"}, nil, nil},
		{"two Transfer-Encoding headers",
			crlf("POST /upload HTTP/1.1", "Host: "+a, auth, "Transfer-Encoding: chunked", "Transfer-Encoding: identity", "Connection: close") + "0\r\n\r\n",
			[]string{"501"}, nil, nil},
		{"space before the colon",
			crlf("POST /upload HTTP/1.1", "Host: "+a, auth, "Transfer-Encoding : chunked", "Content-Length: 4", "Connection: close") + "abcd",
			[]string{"400"}, nil, nil},
		// Go replaces obs-fold with a space (RFC 9112 5.2) and frames
		// by what it then reads; the sandbox gets one unfolded line.
		{"obs-fold continuation line is unfolded into the value",
			crlf("POST /upload HTTP/1.1", "Host: "+a, auth, "X-Folded: a", " Transfer-Encoding: chunked", "Content-Length: 4", "Connection: close") + "abcd",
			[]string{"200"}, []string{"/upload"}, all(header("X-Folded", "a Transfer-Encoding: chunked"), answer("200 4 "+sumABCD))},
		{"obs-fold of Transfer-Encoding",
			crlf("POST /upload HTTP/1.1", "Host: "+a, auth, "Transfer-Encoding:", " chunked", "Content-Length: 5") + "0\r\n\r\n" +
				crlf("GET /smuggled HTTP/1.1", "Host: "+a, auth, "Connection: close"),
			[]string{"200"}, []string{"/upload"}, answer("200 0 e3b0c442")},
		{"HTTP/1.0 keep-alive with TE and CL: framed by the length, then closed",
			crlf("POST /upload HTTP/1.0", "Host: "+a, auth, "Connection: keep-alive", "Transfer-Encoding: chunked", "Content-Length: 5") + "0\r\n\r\n" +
				crlf("GET /smuggled HTTP/1.1", "Host: "+a, auth, "Connection: close"),
			[]string{"200"}, []string{"/upload"}, answer("200 5 ")},
		{"bare LF line ends are read as CRLF; the sandbox gets a clean head",
			"GET /lf HTTP/1.1\nHost: " + a + "\n" + auth + "\nConnection: close\n\n",
			[]string{"200"}, []string{"/lf"}, nil},
		{"chunk size overflowing 64 bits",
			crlf("POST /upload HTTP/1.1", "Host: "+a, auth, "Transfer-Encoding: chunked", "Connection: close") + "10000000000000004\r\nabcd\r\n0\r\n\r\n",
			[]string{"400"}, []string{"~/upload"}, nil},
		{"negative chunk size",
			crlf("POST /upload HTTP/1.1", "Host: "+a, auth, "Transfer-Encoding: chunked", "Connection: close") + "-4\r\nabcd\r\n0\r\n\r\n",
			[]string{"400"}, []string{"~/upload"}, nil},
		{"0x-prefixed chunk size",
			crlf("POST /upload HTTP/1.1", "Host: "+a, auth, "Transfer-Encoding: chunked", "Connection: close") + "0x4\r\nabcd\r\n0\r\n\r\n",
			[]string{"400"}, []string{"~/upload"}, nil},
		{"chunk size not hex",
			crlf("POST /upload HTTP/1.1", "Host: "+a, auth, "Transfer-Encoding: chunked", "Connection: close") + "zz\r\nabcd\r\n0\r\n\r\n",
			[]string{"400"}, []string{"~/upload"}, nil},
		{"chunk line ended by a bare LF",
			crlf("POST /upload HTTP/1.1", "Host: "+a, auth, "Transfer-Encoding: chunked", "Connection: close") + "4\nabcd\r\n0\r\n\r\n",
			[]string{"400"}, []string{"~/upload"}, nil},
		{"chunk longer than its size",
			crlf("POST /upload HTTP/1.1", "Host: "+a, auth, "Transfer-Encoding: chunked", "Connection: close") + "2\r\nabcd\r\n0\r\n\r\n",
			[]string{"400"}, []string{"~/upload"}, nil},
		{"chunk extension is fine",
			crlf("POST /upload HTTP/1.1", "Host: "+a, auth, "Transfer-Encoding: chunked", "Connection: close") + "4;ext=1\r\nabcd\r\n0\r\n\r\n",
			[]string{"200"}, []string{"/upload"}, answer("200 4 " + sumABCD)},
		{"pipelined request for another host is authorised on its own",
			crlf("GET /first HTTP/1.1", "Host: "+a, auth) + crlf("GET /second HTTP/1.1", "Host: "+b, auth, "Connection: close"),
			[]string{"200", "403"}, []string{"/first"}, nil},
		{"NUL in a header value",
			crlf("GET / HTTP/1.1", "Host: "+a, auth, "X-Evil: a\x00b", "Connection: close"),
			[]string{"400"}, nil, nil},
		{"bare CR in a header value",
			crlf("GET / HTTP/1.1", "Host: "+a, auth, "X-Evil: a\rTransfer-Encoding: chunked", "Connection: close"),
			[]string{"400"}, nil, nil},

		// Host games. The label in Host alone picks the sandbox.
		{"absolute-form target naming another host",
			crlf("GET http://"+b+":"+port+"/ HTTP/1.1", "Host: "+a, auth, "Connection: close"), []string{"400"}, nil, nil},
		{"absolute-form target naming the same host",
			crlf("GET http://"+a+":"+port+"/ HTTP/1.1", "Host: "+a, auth, "Connection: close"), []string{"400"}, nil, nil},
		{"authority-form CONNECT",
			crlf("CONNECT 127.0.0.1:22 HTTP/1.1", "Host: "+a, auth, "Connection: close"), []string{"400"}, nil, nil},
		{"duplicate Host",
			crlf("GET / HTTP/1.1", "Host: "+a, "Host: "+b, auth, "Connection: close"), []string{"400"}, nil, nil},
		{"no Host",
			crlf("GET / HTTP/1.1", auth, "Connection: close"), []string{"400"}, nil, nil},
		{"empty Host",
			crlf("GET / HTTP/1.1", "Host:", auth, "Connection: close"), []string{"404"}, nil, nil},
		{"IP literal Host",
			crlf("GET / HTTP/1.1", "Host: 127.0.0.1:"+port, auth, "Connection: close"), []string{"404"}, nil, nil},
		{"Host naming the sandbox's sshd",
			crlf("GET / HTTP/1.1", "Host: localhost:22", auth, "Connection: close"), []string{"404"}, nil, nil},
		{"Host with userinfo",
			crlf("GET / HTTP/1.1", "Host: user@"+a, auth, "Connection: close"), []string{"400"}, nil, nil},
		{"Host with another label as userinfo",
			crlf("GET / HTTP/1.1", "Host: "+b+"@"+a, auth, "Connection: close"), []string{"400"}, nil, nil},
		{"Host with two ports",
			crlf("GET / HTTP/1.1", "Host: "+a+":"+port+":22", auth, "Connection: close"), []string{"404"}, nil, nil},
		{"Host with a port other than ours: same sandbox, nothing else",
			crlf("GET /p HTTP/1.1", "Host: "+a+":1", auth, "Connection: close"), []string{"200"}, []string{"/p"}, nil},
		{"nested label",
			crlf("GET / HTTP/1.1", "Host: x."+a, auth, "Connection: close"), []string{"404"}, nil, nil},
		{"uppercase labels are the same host",
			crlf("GET /upper HTTP/1.1", "Host: "+strings.ToUpper(a)+":"+port, auth, "Connection: close"), []string{"200"}, []string{"/upper"}, nil},
		{"trailing dot is the same host",
			crlf("GET /dot HTTP/1.1", "Host: "+a+".:"+port, auth, "Connection: close"), []string{"200"}, []string{"/dot"}, nil},
		{"uppercase host, another account's token",
			crlf("GET / HTTP/1.1", "Host: "+strings.ToUpper(b), auth, "Connection: close"), []string{"403"}, nil, nil},
		{"percent-encoded dot",
			crlf("GET / HTTP/1.1", "Host: siteaa%2e"+domain, auth, "Connection: close"), []string{"404"}, nil, nil},
		{"non-ASCII label",
			crlf("GET / HTTP/1.1", "Host: s\u0131teaa."+domain, auth, "Connection: close"), []string{"400"}, nil, nil},
		{"X-Forwarded-Host naming another label does not route",
			crlf("GET /xfh HTTP/1.1", "Host: "+b, "X-Forwarded-Host: "+a, auth, "Connection: close"), []string{"403"}, nil, nil},

		// Headers that end at the proxy.
		// Ambiguous credentials are refused, never settled by picking one.
		{"Authorization, ours and a second one",
			crlf("GET /h1 HTTP/1.1", "Host: "+a, auth, "Authorization: Basic eDp5", "Connection: close"), []string{"400"}, nil, nil},
		{"Authorization, another account's and then ours",
			crlf("GET /h1 HTTP/1.1", "Host: "+a, "Authorization: Bearer "+tokenB, auth, "Connection: close"), []string{"400"}, nil, nil},
		{"two preview-token headers",
			crlf("GET /h1 HTTP/1.1", "Host: "+a, "X-Sbx-Preview-Token: "+tokenA, "X-Sbx-Preview-Token: "+tokenB, "Connection: close"), []string{"400"}, nil, nil},
		{"preview-token header and Bearer naming different tokens",
			crlf("GET /h1 HTTP/1.1", "Host: "+a, "X-Sbx-Preview-Token: "+tokenB, auth, "Connection: close"), []string{"400"}, nil, nil},
		{"preview-token header and Bearer naming the same token",
			crlf("GET /h1 HTTP/1.1", "Host: "+a, "X-Sbx-Preview-Token: "+tokenA, auth, "Connection: close"), []string{"200"}, []string{"/h1"},
			noHeader("Authorization", "X-Sbx-Preview-Token")},
		{"preview-token header, and Authorization meant for the app",
			crlf("GET /h2 HTTP/1.1", "Host: "+a, "X-Sbx-Preview-Token: "+tokenA, "Authorization: Basic eDp5", "Connection: close"), []string{"200"}, []string{"/h2"},
			noHeader("Authorization", "X-Sbx-Preview-Token")},
		{"our cookies in two Cookie headers; the app's pass",
			crlf("GET /h3 HTTP/1.1", "Host: "+a, auth, "Cookie: __Host-sbx-preview=x; theme=dark", "Cookie: __Host-sbx-login=y; lang=en", "Connection: close"), []string{"200"}, []string{"/h3"},
			header("Cookie", "theme=dark; lang=en")},
		{"forwarding headers are the proxy's own",
			crlf("GET /h4 HTTP/1.1", "Host: "+a, auth, "X-Forwarded-For: 6.6.6.6", "X-Forwarded-Host: evil.example", "X-Forwarded-Proto: https",
				"X-Forwarded-Port: 443", "X-Forwarded-Prefix: /admin", "X-Forwarded-Ssl: on", "X-Forwarded-Server: evil", "Connection: close"),
			[]string{"200"}, []string{"/h4"},
			all(header("X-Forwarded-For", "127.0.0.1"), header("X-Forwarded-Host", a), header("X-Forwarded-Proto", "http"),
				noHeader("X-Forwarded-Port", "X-Forwarded-Prefix", "X-Forwarded-Ssl", "X-Forwarded-Server"))},
		{"client address headers",
			crlf("GET /h5 HTTP/1.1", "Host: "+a, auth, "X-Real-IP: 6.6.6.6", "Forwarded: for=6.6.6.6;host=evil.example;proto=https",
				"True-Client-IP: 6.6.6.6", "X-Client-IP: 6.6.6.6", "Client-IP: 6.6.6.6", "X-Cluster-Client-IP: 6.6.6.6", "Connection: close"),
			[]string{"200"}, []string{"/h5"},
			noHeader("X-Real-Ip", "Forwarded", "True-Client-Ip", "X-Client-Ip", "Client-Ip", "X-Cluster-Client-Ip")},
		{"underscore spellings that CGI-style servers read as ours",
			crlf("GET /h6 HTTP/1.1", "Host: "+a, auth, "X_Forwarded_For: 6.6.6.6", "X-Real_IP: 6.6.6.6", "X_Sbx_Preview_Token: "+tokenA,
				"X-App_Header: kept", "Connection: close"),
			[]string{"200"}, []string{"/h6"},
			all(noHeader("X_forwarded_for", "X-Real_ip", "X_sbx_preview_token"), header("X-App_header", "kept"), header("X-Forwarded-For", "127.0.0.1"))},
		{"Connection cannot remove the proxy's forwarding headers",
			crlf("GET /h7 HTTP/1.1", "Host: "+a, auth, "Connection: X-Forwarded-For, X-Forwarded-Host, close"),
			[]string{"200"}, []string{"/h7"},
			all(header("X-Forwarded-For", "127.0.0.1"), header("X-Forwarded-Host", a))},
		{"Upgrade to h2c is dropped",
			crlf("GET /h8 HTTP/1.1", "Host: "+a, auth, "Connection: Upgrade, HTTP2-Settings, close", "Upgrade: h2c", "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA"),
			[]string{"200"}, []string{"/h8"},
			noHeader("Upgrade", "Http2-Settings", "Connection")},
		// Paths go to the app as sent; no spelling reaches the edge's own
		// namespace but the canonical one, and none passes to the app.
		{"dot-segments pass to the app as sent",
			crlf("GET /a/../b HTTP/1.1", "Host: "+a, auth, "Connection: close"), []string{"200"}, []string{"/a/../b"}, nil},
		{"encoded dot-segments pass to the app as sent",
			crlf("GET /a/%2e%2e/b HTTP/1.1", "Host: "+a, auth, "Connection: close"), []string{"200"}, []string{"/a/../b"},
			func(r *http.Request, _ []string) string {
				if !strings.HasPrefix(r.RequestURI, "/a/%2e%2e/b?") {
					return fmt.Sprintf("the sandbox got %q, want the target as sent", r.RequestURI)
				}
				return ""
			}},
		{"a segment only ending in the reserved name is the app's",
			crlf("GET /docs/x__sbx_preview HTTP/1.1", "Host: "+a, auth, "Connection: close"), []string{"200"}, []string{"/docs/x__sbx_preview"}, nil},
		{"dot-segments into the edge's paths",
			crlf("GET /x/../__sbx_preview/wake-status HTTP/1.1", "Host: "+a, auth, "Connection: close"), []string{"400"}, nil, nil},
		{"encoded dot-segments into the edge's paths",
			crlf("GET /x/%2e%2e/__sbx_preview/ticket HTTP/1.1", "Host: "+a, auth, "Connection: close"), []string{"400"}, nil, nil},
		{"encoded slash into the edge's paths",
			crlf("GET /x/..%2f__sbx_preview/sign-out HTTP/1.1", "Host: "+a, auth, "Connection: close"), []string{"400"}, nil, nil},
		{"double slash before the edge's paths",
			crlf("GET //__sbx_preview/wake-status HTTP/1.1", "Host: "+a, auth, "Connection: close"), []string{"400"}, nil, nil},
		{"backslash before the edge's paths",
			crlf("GET /x/..\\__sbx_preview/wake-status HTTP/1.1", "Host: "+a, auth, "Connection: close"), []string{"400"}, nil, nil},
		{"the edge's paths in another case",
			crlf("GET /__SBX_Preview/wake-status HTTP/1.1", "Host: "+a, auth, "Connection: close"), []string{"400"}, nil, nil},
		{"percent-encoded name of the edge's paths, not one of its endpoints",
			crlf("GET /%5f_sbx_preview/other HTTP/1.1", "Host: "+a, auth, "Connection: close"), []string{"400"}, nil, nil},
		{"dot-segments into the login host's paths are none of them",
			crlf("GET /x/../login HTTP/1.1", "Host: "+domain+":"+port, "Connection: close"), []string{"404"}, nil, nil},
		{"unknown path under the edge's prefix",
			crlf("GET /__sbx_preview/other HTTP/1.1", "Host: "+a, auth, "Connection: close"), []string{"400"}, nil, nil},
		{"Upgrade to anything but websocket is dropped",
			crlf("GET /h9 HTTP/1.1", "Host: "+a, auth, "Connection: Upgrade, close", "Upgrade: foo/1"),
			[]string{"200"}, []string{"/h9"},
			noHeader("Upgrade", "Connection")},
	} {
		// Every request line is tagged with the case, so a request the
		// sandbox receives late (after an aborted body) is not taken
		// for the next case's.
		tag := "c=" + strconv.Itoa(i)
		raw := strings.ReplaceAll(tc.raw, " HTTP/1.1\r\n", "?"+tag+" HTTP/1.1\r\n")
		raw = strings.ReplaceAll(raw, " HTTP/1.1\n", "?"+tag+" HTTP/1.1\n")
		raw = strings.ReplaceAll(raw, " HTTP/1.0\r\n", "?"+tag+" HTTP/1.0\r\n")
		got := e.wire(raw)
		var paths []string
		var last *http.Request
		for _, r := range e.upstream.all() {
			if r.URL.RawQuery == tag {
				paths = append(paths, r.URL.Path)
				last = r
			}
		}
		var codes []string
		for _, a := range got {
			code, _, _ := strings.Cut(a, " ")
			codes = append(codes, code)
		}
		if fmt.Sprint(codes) != fmt.Sprint(tc.answers) || !samePaths(paths, tc.upstream) {
			t.Errorf("%s: answered %v and the sandbox saw %q; want %v and %q", tc.name, got, paths, tc.answers, tc.upstream)
			continue
		}
		if tc.check != nil && last != nil {
			if s := tc.check(last, got); s != "" {
				t.Errorf("%s: %s", tc.name, s)
			}
		}
		if testing.Verbose() {
			fmt.Fprintf(os.Stderr, "attack %-64s answered %v, sandbox saw %q\n", tc.name, codes, paths)
		}
	}
}

// samePaths compares what the sandbox saw with what a case wants; a
// wanted "~/p" is a request whose body the client broke off: the sandbox
// may have seen its head (the proxy streams bodies) or not.
func samePaths(got, want []string) bool {
	var must []string
	for _, w := range want {
		if p, ok := strings.CutPrefix(w, "~"); ok {
			if len(got) > 0 && got[len(got)-1] == p {
				got = got[:len(got)-1]
			}
			continue
		}
		must = append(must, w)
	}
	return fmt.Sprint(got) == fmt.Sprint(must)
}
