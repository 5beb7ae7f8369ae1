package h1

import (
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// methods are the methods the lean loop takes, as constants so that a
// request's method costs no allocation. CONNECT, PRI (h2c's preface) and
// extension methods go to net/http.
var methods = [...]string{
	http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
	http.MethodPatch, http.MethodDelete, http.MethodOptions,
}

// parse fills c.req from head, or returns errNotPlain for a request the
// lean loop leaves to net/http. Every check here is at least as strict as
// net/http's, so a request it takes is one net/http would take the same
// way: where the two could differ, net/http decides.
func (c *conn) parse(head []byte) error {
	// One string for the whole head: header values and canonical names
	// are slices of it, not a string each.
	hs := string(head)
	line, rest, _ := strings.Cut(hs, "\r\n")
	m, target, u, ok := requestLine(line)
	if !ok {
		return errNotPlain
	}

	// readHead saw no bare LF; a CR alone fails validName or validValue.
	lines := rest[:len(rest)-2] // without the blank line's CRLF
	n := strings.Count(lines, "\r\n")
	h := make(http.Header, n)
	vals := make([]string, n) // one backing array, as textproto does
	var host string
	hosts, lengths := 0, 0
	contentLength := int64(0)
	closeAfter := false
	for i := 0; lines != ""; i++ {
		var l string
		l, lines, _ = strings.Cut(lines, "\r\n")
		name, value, ok := headerLine(l)
		if !ok {
			return errNotPlain
		}
		key := name
		if !isCanonical(name) {
			key = textproto.CanonicalMIMEHeaderKey(name)
		}
		switch key {
		case "Host":
			hosts++
			host = value
			continue // net/http keeps it in r.Host only
		case "Content-Length":
			lengths++
			cl, ok := parseLength(value)
			if !ok || cl > MaxBody {
				return errNotPlain
			}
			contentLength = cl
		case "Transfer-Encoding", "Upgrade", "Expect", "Trailer", "Http2-Settings":
			return errNotPlain
		case "Connection":
			for tok := range strings.SplitSeq(value, ",") {
				switch tok = textproto.TrimString(tok); {
				case strings.EqualFold(tok, "close"):
					closeAfter = true
				case strings.EqualFold(tok, "upgrade"):
					return errNotPlain
				}
			}
		}
		vals[i] = value
		if old, ok := h[key]; ok {
			h[key] = append(old, value)
		} else {
			h[key] = vals[i : i+1 : i+1]
		}
	}
	if hosts != 1 || lengths > 1 || host == "" || !httpguts.ValidHostHeader(host) {
		return errNotPlain
	}
	c.body = nil
	var b io.ReadCloser = http.NoBody
	if contentLength > 0 {
		c.body = &body{c: c, left: contentLength}
		b = c.body
	}
	// The literal stays on the stack; WithContext makes the request (one
	// allocation) that the handler gets, and may keep.
	tmpl := http.Request{
		Method: m, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, ContentLength: contentLength, Close: closeAfter,
		Host: host, RemoteAddr: c.remote, RequestURI: target, TLS: c.tls,
		Body: b,
	}
	c.req = tmpl.WithContext(c.ctx)
	return nil
}

// requestLine splits a request line the lean loop takes: a known
// method, an origin-form target and HTTP/1.1.
func requestLine(line string) (method, target string, u *url.URL, ok bool) {
	method, line, ok1 := strings.Cut(line, " ")
	target, proto, ok2 := strings.Cut(line, " ")
	if !ok1 || !ok2 || proto != "HTTP/1.1" || !plainTarget(target) {
		return "", "", nil, false
	}
	if method = knownMethod(method); method == "" {
		return "", "", nil, false
	}
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return "", "", nil, false
	}
	return method, target, u, true
}

// headerLine splits a header line the lean loop takes: a token, a colon,
// a value of visible ASCII (trimmed). A folded line has no token first.
func headerLine(l string) (name, value string, ok bool) {
	name, value, ok = strings.Cut(l, ":")
	if !ok || !validName(name) {
		return "", "", false
	}
	value = textproto.TrimString(value)
	return name, value, validValue(value)
}

// plainSoFar reports whether every line already ended in an unfinished
// head is one the lean loop takes. net/http judges a request line as it
// ends and a header line once the next byte comes, so a head the lean
// loop would hand over anyway goes now: waiting for its end would answer
// it at the header timeout, where net/http answers at once.
func plainSoFar(b []byte) bool {
	s := string(b) // a head in pieces is rare: the copy does not matter
	for first := true; ; first = false {
		line, rest, ok := strings.Cut(s, "\r\n")
		if !ok {
			return true
		}
		if first {
			_, _, _, ok = requestLine(line)
		} else {
			_, _, ok = headerLine(line)
		}
		if !ok {
			return false
		}
		s = rest
	}
}

func knownMethod(m string) string {
	for _, k := range methods {
		if m == k {
			return k
		}
	}
	return ""
}

// plainTarget reports whether t is an origin-form target of visible
// ASCII: no absolute form, no "*", no raw bytes past ASCII.
func plainTarget(t string) bool {
	if t == "" || t[0] != '/' || strings.HasPrefix(t, "//") {
		return false
	}
	for i := 0; i < len(t); i++ {
		if b := t[i]; b <= ' ' || b >= 0x7f || b == '#' {
			return false
		}
	}
	return true
}

// validName reports whether name is an RFC 9110 token (no spaces: a
// space before the colon is refused by net/http).
func validName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !httpguts.IsTokenRune(rune(name[i])) {
			return false
		}
	}
	return true
}

// validValue reports whether v has only visible ASCII, spaces and tabs;
// anything else (controls, bytes past ASCII) is net/http's to judge.
func validValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if b := v[i]; b < ' ' && b != '\t' || b >= 0x7f {
			return false
		}
	}
	return true
}

// isCanonical reports whether name is already in canonical MIME form
// (Content-Type), so that it needs no copy.
func isCanonical(name string) bool {
	upper := true
	for i := 0; i < len(name); i++ {
		b := name[i]
		if upper && 'a' <= b && b <= 'z' || !upper && 'A' <= b && b <= 'Z' {
			return false
		}
		upper = b == '-'
	}
	return true
}

// parseLength parses a Content-Length of plain digits.
func parseLength(v string) (int64, bool) {
	if v == "" || len(v) > 10 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, false
		}
		n = n*10 + int64(v[i]-'0')
	}
	return n, true
}
