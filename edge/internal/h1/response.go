package h1

import (
	"fmt"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// pendingMax is how much body a response holds before its head is
// decided: a handler that ends within it gets a Content-Length, a longer
// one a chunked body, and an untyped one a sniffed Content-Type, as
// net/http decides.
const pendingMax = 2048

// response is the http.ResponseWriter of the lean loop. Its head is
// taken from the header map when WriteHeader is called (later changes
// count only as trailers), and written with the first byte of body that
// does not fit in pending, at a flush, or when the handler returns.
type response struct {
	c      *conn
	header http.Header

	status      int
	head        []byte // the handler's header lines, taken at WriteHeader
	hasDate     bool
	sniff       bool   // no type and no encoding: sniff one
	te          string // the handler's Transfer-Encoding
	hasTrailers bool
	addClose    bool     // the head says Connection: close
	trailers    []string // declared trailer keys
	declared    int64    // the handler's Content-Length, -1 if none
	written     int64
	committed   bool // the head is in the writer
	chunked     bool
	noBody      bool // HEAD: the body is counted, not sent
	// closeAfter ends the connection after this answer.
	closeAfter bool
	pending    []byte
	pendingBuf [pendingMax]byte
	scratch    []byte
}

func (w *response) reset(c *conn, r *http.Request) {
	if w.header == nil {
		w.header = make(http.Header)
	} else {
		clear(w.header)
	}
	*w = response{
		c: c, header: w.header, head: w.head[:0], trailers: w.trailers[:0],
		declared: -1, noBody: r.Method == http.MethodHead, closeAfter: r.Close,
		scratch: w.scratch[:0],
	}
	w.pending = w.pendingBuf[:0]
}

func (w *response) Header() http.Header { return w.header }

func (w *response) WriteHeader(code int) { w.writeHeader(code, true) }

// writeHeader is WriteHeader; byHandler is false for the 200 that finish
// writes for a handler that wrote nothing, which (as net/http's own
// implicit answer, which no wrapper sees) keeps the connection.
func (w *response) writeHeader(code int, byHandler bool) {
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if w.status != 0 {
		return
	}
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		// Informational answers go out at once, with the headers set
		// so far, and do not count as the answer.
		w.c.bw.Write(statusLine(w.scratch[:0], code))
		w.c.bw.Write(appendHeader(w.scratch[:0], w.header, func(k string) bool {
			return k == "Content-Length" || k == "Transfer-Encoding"
		}))
		w.c.bw.WriteString("\r\n")
		_ = w.c.bw.Flush()
		return
	}
	w.status = code
	h := w.header
	if byHandler && w.c.body != nil && !w.c.body.done() {
		// The rule New adds to net/http (httplimit's body deadline): an
		// answer begun before the body was read to its end closes the
		// connection, rather than first reading the rest to keep it.
		h.Set("Connection", "close")
	}
	if cl := h.Get("Content-Length"); cl != "" {
		if v, err := strconv.ParseInt(strings.TrimSpace(cl), 10, 64); err == nil && v >= 0 {
			w.declared = v
		} else {
			w.c.srv.logf("http: invalid Content-Length of %q", cl)
			h.Del("Content-Length")
		}
	}
	// The decisions net/http takes from the head as it stands now.
	_, w.hasDate = h["Date"]
	_, hasType := h["Content-Type"]
	w.te = h.Get("Transfer-Encoding")
	w.sniff = !hasType && w.te == "" && h.Get("Content-Encoding") == "" && bodyAllowed(code)
	for k := range h {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			w.hasTrailers = true
		}
	}
	for _, v := range h["Trailer"] {
		w.hasTrailers = true
		for k := range strings.SplitSeq(v, ",") {
			if k = textproto.TrimString(k); k != "" {
				w.trailers = append(w.trailers, http.CanonicalHeaderKey(k))
			}
		}
	}
	if w.declared >= 0 && w.te != "" && w.te != "identity" {
		w.c.srv.logf("http: WriteHeader called with both Transfer-Encoding of %q and a Content-Length of %d", w.te, w.declared)
		w.declared = -1
		h.Del("Content-Length")
	}
	if h.Get("Connection") == "close" || w.te == "identity" && !w.noBody && bodyAllowed(code) && w.declared < 0 {
		w.closeAfter = true
	}
	keepConn := !w.closeAfter || hasToken(h.Get("Connection"), "close")
	w.head = appendHeader(w.head, h, func(k string) bool {
		switch k {
		case "Content-Type":
			return code == http.StatusNotModified
		case "Content-Length":
			return !bodyAllowed(code)
		case "Transfer-Encoding":
			return w.noBody || !bodyAllowed(code) || w.declared >= 0 || w.te == "identity" || w.te == "chunked"
		case "Connection":
			return !keepConn
		}
		return false
	})
	w.addClose = !keepConn
}

// bodyAllowed reports whether an answer with status code has a body.
func bodyAllowed(code int) bool {
	return code >= 200 && code != http.StatusNoContent && code != http.StatusNotModified
}

func (w *response) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.bodyAllowed() {
		return 0, http.ErrBodyNotAllowed
	}
	if w.declared >= 0 && w.written+int64(len(p)) > w.declared {
		return 0, http.ErrContentLength
	}
	w.written += int64(len(p))
	if !w.committed {
		if len(w.pending)+len(p) <= pendingMax {
			w.pending = append(w.pending, p...)
			return len(p), nil
		}
		if err := w.commit(false, p); err != nil {
			return 0, err
		}
	}
	if w.noBody {
		return len(p), nil
	}
	return len(p), w.writeBody(p)
}

func (w *response) writeBody(p []byte) error {
	if len(p) == 0 {
		return nil
	}
	bw := w.c.bw
	if w.chunked {
		w.scratch = strconv.AppendInt(w.scratch[:0], int64(len(p)), 16)
		w.scratch = append(w.scratch, '\r', '\n')
		bw.Write(w.scratch)
	}
	_, err := bw.Write(p)
	if w.chunked {
		_, err = bw.WriteString("\r\n")
	}
	return err
}

// commit writes the head, then what the body held so far; first is the
// body's first bytes when pending has none (a write past pendingMax).
// done: the handler has returned, so pending is the whole body.
func (w *response) commit(done bool, first []byte) error {
	if w.committed {
		return nil
	}
	w.committed = true
	if len(w.pending) > 0 {
		first = w.pending
	}
	bw := w.c.bw
	w.scratch = statusLine(w.scratch[:0], w.status)
	bw.Write(w.scratch)
	bw.Write(w.head)
	if w.sniff && len(first) > 0 {
		bw.WriteString("Content-Type: ")
		bw.WriteString(http.DetectContentType(first))
		bw.WriteString("\r\n")
	}
	if !w.hasDate {
		bw.WriteString("Date: ")
		bw.WriteString(httpDate())
		bw.WriteString("\r\n")
	}
	switch {
	case !w.bodyAllowed() || w.declared >= 0:
	case done && !w.hasTrailers && w.te == "" && (!w.noBody || len(w.pending) > 0):
		w.declared = int64(len(w.pending))
		w.scratch = append(strconv.AppendInt(append(w.scratch[:0], "Content-Length: "...), int64(len(w.pending)), 10), '\r', '\n')
		bw.Write(w.scratch)
	case w.noBody || w.te == "identity":
	default:
		w.chunked = true
		bw.WriteString("Transfer-Encoding: chunked\r\n")
	}
	if w.addClose {
		bw.WriteString("Connection: close\r\n")
	}
	_, err := bw.WriteString("\r\n")
	if err != nil || w.noBody {
		return err
	}
	return w.writeBody(w.pending)
}

// Flush sends the head and what the body has so far.
func (w *response) Flush() { _ = w.FlushError() }

// FlushError is Flush for http.ResponseController.
func (w *response) FlushError() error {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if err := w.commit(false, nil); err != nil {
		return err
	}
	return w.c.bw.Flush()
}

// finish completes the answer once the handler has returned.
func (w *response) finish() error {
	if w.status == 0 {
		w.writeHeader(http.StatusOK, false)
	}
	if err := w.commit(true, nil); err != nil {
		return err
	}
	if w.chunked {
		w.c.bw.WriteString("0\r\n")
		w.c.bw.Write(w.appendTrailers(w.scratch[:0]))
		w.c.bw.WriteString("\r\n")
	}
	if w.declared >= 0 && w.written < w.declared && !w.noBody && w.bodyAllowed() {
		// The client waits for bytes that will not come; only closing
		// tells it the answer is short.
		w.closeAfter = true
	}
	return w.c.bw.Flush()
}

// appendTrailers appends the declared trailers' values and those set
// with http.TrailerPrefix.
func (w *response) appendTrailers(b []byte) []byte {
	for _, k := range w.trailers {
		for _, v := range w.header[k] {
			b = appendLine(b, k, v)
		}
	}
	for k, vv := range w.header {
		if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok && validName(name) {
			for _, v := range vv {
				b = appendLine(b, name, v)
			}
		}
	}
	return b
}

// appendHeader appends h's lines, but for the keys skip reports, for
// trailer-prefixed keys and for invalid names.
func appendHeader(b []byte, h http.Header, skip func(string) bool) []byte {
	for k, vv := range h {
		if skip(k) || strings.HasPrefix(k, http.TrailerPrefix) || !validName(k) {
			continue
		}
		for _, v := range vv {
			b = appendLine(b, k, v)
		}
	}
	return b
}

// appendLine appends "k: v", with line breaks in v made spaces so that a
// value cannot start a header of its own.
func appendLine(b []byte, k, v string) []byte {
	b = append(b, k...)
	b = append(b, ':', ' ')
	v = textproto.TrimString(v)
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		b = append(b, c)
	}
	return append(b, '\r', '\n')
}

func statusLine(b []byte, code int) []byte {
	if code == http.StatusOK {
		return append(b, "HTTP/1.1 200 OK\r\n"...)
	}
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, ' ')
	if t := http.StatusText(code); t != "" {
		b = append(b, t...)
	} else {
		b = append(b, "status code "...)
		b = strconv.AppendInt(b, int64(code), 10)
	}
	return append(b, '\r', '\n')
}

func hasToken(v, tok string) bool {
	for t := range strings.SplitSeq(v, ",") {
		if strings.EqualFold(textproto.TrimString(t), tok) {
			return true
		}
	}
	return false
}

// date caches the Date header's value for the second it names.
var date atomic.Pointer[dateValue]

type dateValue struct {
	sec int64
	s   string
}

func httpDate() string {
	now := time.Now()
	if d := date.Load(); d != nil && d.sec == now.Unix() {
		return d.s
	}
	d := &dateValue{sec: now.Unix(), s: now.UTC().Format(http.TimeFormat)}
	date.Store(d)
	return d.s
}

func (w *response) bodyAllowed() bool { return bodyAllowed(w.status) }
