package preview

import (
	"bytes"
	"io"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// readAnswer reads the head of an upstream answer to r from c, as
// http.ReadResponse would. Most answers from a dev server are the plain
// shape: an HTTP/1.1 final status, CRLF lines, a single Content-Length,
// no Transfer-Encoding, Trailer, Pragma or Connection: close, and a head
// that came in with the first read. That shape is parsed here from the
// buffer, in one string for the whole head and one slice for its values,
// where http.ReadResponse costs a textproto.Reader, a string per line and
// a body wrapper (about a third of the lean relay's allocations). Any
// other answer, a byte of doubt included, is read by http.ReadResponse,
// which stays the single source of truth for errors and odd framing:
// the fast path only ever accepts heads that http.ReadResponse reads to
// the same Response (FuzzAnswerHead compares the two).
func readAnswer(c *upConn, r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodHead {
		if _, err := c.br.Peek(1); err != nil {
			// What http.ReadResponse makes of a read that brings nothing.
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		buf, _ := c.br.Peek(c.br.Buffered())
		if n := bytes.Index(buf, crlfcrlf); n >= 0 {
			if resp, ok := c.parseAnswer(buf[:n+2], r); ok {
				_, _ = c.br.Discard(n + 4)
				return resp, nil
			}
		}
	}
	return http.ReadResponse(c.br, r)
}

var crlfcrlf = []byte("\r\n\r\n")

// parseAnswer parses head (the status line and header lines, each ended
// by CRLF, without the blank line) into c's Response; ok false: not the
// plain shape, for http.ReadResponse to read.
func (c *upConn) parseAnswer(head []byte, r *http.Request) (_ *http.Response, ok bool) {
	lines := bytes.Count(head, crlf)
	// Every LF ends a line and follows a CR; a CR anywhere else (or a
	// bare LF) is for net/http to judge.
	if lines != bytes.Count(head, lf) || lines != bytes.Count(head, cr) {
		return nil, false
	}
	const proto = "HTTP/1.1 "
	if len(head) < len(proto)+3+2 || string(head[:len(proto)]) != proto {
		return nil, false
	}
	code := 0
	for _, d := range head[len(proto) : len(proto)+3] {
		if d < '0' || d > '9' {
			return nil, false
		}
		code = code*10 + int(d-'0')
	}
	// 1xx, and the answers without a body (204, 304) or with codes past
	// the registry: net/http's.
	if code < 200 || code > 599 || code == http.StatusNoContent || code == http.StatusNotModified {
		return nil, false
	}
	if rest := head[len(proto)+3]; rest != ' ' && rest != '\r' {
		return nil, false
	}
	s := string(head) // one allocation: keys and values are slices of it
	eol := strings.Index(s, "\r\n")
	status := s[len(proto):eol]
	s = s[eol+2:]
	// The map is the connection's last one, cleared for each answer:
	// leanRelay moves its values out and drops it before the connection
	// is pooled (put).
	h := c.resp.Header
	if h == nil {
		h = make(http.Header, lines-1)
	} else {
		clear(h)
	}
	vals := make([]string, lines-1)
	contentLength := int64(-1)
	for s != "" {
		eol = strings.Index(s, "\r\n")
		line := s[:eol]
		s = s[eol+2:]
		k, v, found := strings.Cut(line, ":")
		if !found || !httpguts.ValidHeaderFieldName(k) {
			return nil, false // an empty or bad name, or a folded line
		}
		v = strings.Trim(v, " \t")
		for i := 0; i < len(v); i++ {
			if b := v[i]; b < ' ' && b != '\t' || b == 0x7f {
				return nil, false
			}
		}
		k = textproto.CanonicalMIMEHeaderKey(k)
		switch k {
		case "Transfer-Encoding", "Trailer", "Pragma":
			return nil, false
		case "Connection":
			if httpguts.HeaderValuesContainsToken([]string{v}, "close") {
				return nil, false
			}
		case "Content-Length":
			if contentLength >= 0 || v == "" || len(v) > 18 {
				return nil, false
			}
			for i := 0; i < len(v); i++ {
				if v[i] < '0' || v[i] > '9' {
					return nil, false
				}
			}
			contentLength, _ = strconv.ParseInt(v, 10, 64)
		}
		vals[0] = v
		if vv, dup := h[k]; dup {
			h[k] = append(vv, v)
		} else {
			h[k] = vals[:1:1]
		}
		vals = vals[1:]
	}
	if contentLength < 0 {
		return nil, false // a body up to the close: net/http's
	}
	c.resp = http.Response{
		Status: status, StatusCode: code, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: http.NoBody, ContentLength: contentLength, Request: r,
	}
	if contentLength > 0 {
		c.body = answerBody{c: c, left: contentLength}
		c.resp.Body = &c.body
	}
	return &c.resp, true
}

// maxKeptKeys bounds the header map an upConn keeps between answers: a
// head with more keys (a rare, large one) is not kept (clear does not
// shrink a map).
const maxKeptKeys = 32

var crlf, cr, lf = []byte("\r\n"), []byte("\r"), []byte("\n")

// answerBody is the body of an answer of the plain shape: Content-Length
// bytes of c, read as http.ReadResponse's body reads them (the last
// bytes come with io.EOF; an end before them is io.ErrUnexpectedEOF).
type answerBody struct {
	c      *upConn
	left   int64
	sawEOF bool
}

func (b *answerBody) Read(p []byte) (int, error) {
	if b.sawEOF || b.left <= 0 {
		b.sawEOF = true
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.c.br.Read(p)
	b.left -= int64(n)
	switch {
	case err == io.EOF:
		b.sawEOF = true
		if b.left > 0 {
			err = io.ErrUnexpectedEOF
		}
	case err == nil && n > 0 && b.left == 0:
		b.sawEOF, err = true, io.EOF
	}
	return n, err
}

// Close is called once the body is read to its end: nothing to do.
func (b *answerBody) Close() error { return nil }
