package h1

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sbxedge/sbx/internal/httplimit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo answers with what it was asked, in a form both servers render
// alike, and shapes its answer by the query: status, n (body bytes),
// cl (declare the length), flush, trailer, ct=none (no type: sniffed),
// short (declare more than is sent), panic, abort, info (an informational
// answer first), read (body bytes to read before answering).
func echo(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Has("panic") {
		panic("boom")
	}
	if q.Has("abort") {
		panic(http.ErrAbortHandler)
	}
	var body []byte
	if v := q.Get("read"); v != "" {
		n, _ := strconv.Atoi(v)
		body = make([]byte, n)
		n, _ = io.ReadFull(r.Body, body)
		body = body[:n]
	} else {
		body, _ = io.ReadAll(r.Body)
	}
	var keys []string
	for k := range r.Header {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s host=%q close=%v tls=%v cl=%d\n", r.Method, r.RequestURI, r.Proto, r.Host, r.Close, r.TLS != nil, r.ContentLength)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s: %q\n", k, r.Header[k])
	}
	fmt.Fprintf(&b, "body %q\n", body)
	out := []byte(b.String())
	if v := q.Get("n"); v != "" {
		n, _ := strconv.Atoi(v)
		out = []byte(strings.Repeat("<html>x", n/7+1)[:n])
	}
	if !q.Has("ct") {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	}
	if q.Has("info") {
		w.Header().Set("Link", "</a.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
	}
	if q.Has("cl") {
		w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	}
	if q.Has("short") {
		w.Header().Set("Content-Length", strconv.Itoa(len(out)+10))
	}
	if q.Has("trailer") {
		w.Header().Set("Trailer", "X-Sum")
	}
	w.Header().Set("X-Multi", "a\r\nInjected: yes")
	status := http.StatusOK
	if v := q.Get("status"); v != "" {
		status, _ = strconv.Atoi(v)
	}
	w.WriteHeader(status)
	w.Header().Set("X-Late", "not in the head")
	if q.Has("flush") && len(out) > 1 {
		_, _ = w.Write(out[:1])
		http.NewResponseController(w).Flush()
		out = out[1:]
	}
	_, _ = w.Write(out)
	if q.Has("trailer") {
		w.Header().Set("X-Sum", "42")
		w.Header().Set(http.TrailerPrefix+"X-Undeclared", "7")
	}
}

// servers starts the same handler on the lean server and on a plain
// net/http server, and returns their addresses.
func servers(t testing.TB, h http.HandlerFunc) (lean, std string) {
	t.Helper()
	quiet := func() *http.Server {
		return &http.Server{Handler: h, ReadHeaderTimeout: hdrTimeout, IdleTimeout: 5 * time.Second,
			ErrorLog: nopLogger()}
	}
	s := New(quiet(), true, httplimit.BodyDeadline{})
	ln := listen(t)
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	std1 := quiet()
	// net/http with the rules New adds to it (closeAfterCoded, and the
	// body deadline's close of a connection answered before its body was
	// read): the lean server must match it.
	inner := httplimit.BodyDeadline{}.Wrap(h)
	std1.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		closeAfterCoded(w, r)
		inner.ServeHTTP(w, r)
	})
	ln2 := listen(t)
	go func() { _ = std1.Serve(ln2) }()
	t.Cleanup(func() {
		_ = s.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
		_ = std1.Close()
	})
	return ln.Addr().String(), ln2.Addr().String()
}

func listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// exchange sends raw on a new connection, reads one answer per method
// in methods, and renders them with whether the connection was closed
// after: the same text from both servers means the same behaviour.
// The exchange's clock. A later answer comes within answerWait, if at
// all; a server acting at its header timeout (hdrTimeout, well past
// answerWait) does so in the last phase, which reads until settle has
// passed since the request was sent: so that when a server acts is no
// race with when the harness looks. settle is short of two header
// timeouts: a server that gives a slow head twice the time is caught.
const (
	hdrTimeout = 500 * time.Millisecond
	answerWait = 300 * time.Millisecond
	settle     = hdrTimeout + 400*time.Millisecond
)

func exchange(t testing.TB, addr, raw string, methods []string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return "dial: " + err.Error() // from any goroutine: no Fatal
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	if _, err := io.WriteString(c, raw); err != nil {
		return "write: " + err.Error()
	}
	br := bufio.NewReader(c)
	var b strings.Builder
	for i, m := range methods {
		if i > 0 {
			// Later answers are pipelined, or follow an informational
			// one: they come at once, if at all.
			_ = c.SetReadDeadline(time.Now().Add(answerWait))
		}
		resp, err := http.ReadResponse(br, &http.Request{Method: m})
		var ne net.Error
		if i > 0 && errors.As(err, &ne) && ne.Timeout() {
			b.WriteString("no more answers\n")
			break
		}
		if err != nil {
			fmt.Fprintf(&b, "no answer (%v)\n", errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isReset(err))
			return b.String()
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Fprintf(&b, "%s %v cl=%d te=%v close=%v\n", resp.Status, resp.Proto, resp.ContentLength, resp.TransferEncoding, resp.Close)
		writeHeader(&b, resp.Header)
		fmt.Fprintf(&b, "body %s err=%v\ntrailer:\n", short(body), err)
		writeHeader(&b, resp.Trailer)
	}
	// What comes later (an answer at the header timeout), and whether
	// the connection is still open once settle has passed.
	_ = c.SetReadDeadline(start.Add(settle))
	late, err := io.ReadAll(br)
	var ne net.Error
	fmt.Fprintf(&b, "then: %q open=%v\n", dateLine.ReplaceAll(late, nil), errors.As(err, &ne) && ne.Timeout())
	return b.String()
}

var dateLine = regexp.MustCompile(`(?m)^Date: .*\r\n`)

// short renders a body, long ones by length and ends.
func short(b []byte) string {
	if len(b) <= 200 {
		return strconv.Quote(string(b))
	}
	return fmt.Sprintf("%d bytes %q...%q", len(b), b[:40], b[len(b)-40:])
}

func isReset(err error) bool { return strings.Contains(err.Error(), "connection reset") }

func writeHeader(b *strings.Builder, h http.Header) {
	keys := make([]string, 0, len(h))
	for k := range h {
		if k != "Date" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(b, "  %s: %q\n", k, h[k])
	}
}

func nopLogger() *log.Logger { return log.New(io.Discard, "", 0) }

// parityCases are raw requests, each with the methods of the answers
// it should get; the lean server must answer each exactly as net/http.
var parityCases = []struct {
	name    string
	raw     string
	methods []string
}{
	{"get", "GET /a?x=1 HTTP/1.1\r\nHost: example.com\r\nUser-Agent: t\r\nAccept: */*\r\n\r\n", []string{"GET"}},
	{"lowercase names", "GET / HTTP/1.1\r\nhost: example.com\r\nsec-ch-ua: \"x\"\r\nx-custom-THING: 1\r\netag: e\r\n\r\n", []string{"GET"}},
	{"repeated header", "GET / HTTP/1.1\r\nHost: h\r\nCookie: a=1\r\nCookie: b=2\r\nX-A: 1\r\nX-A: 2\r\n\r\n", []string{"GET"}},
	{"pipelined", "GET /1 HTTP/1.1\r\nHost: h\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", []string{"GET", "GET"}},
	{"post body", "POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello", []string{"POST"}},
	{"body then next", "PUT /p HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabcGET /n HTTP/1.1\r\nHost: h\r\n\r\n", []string{"PUT", "GET"}},
	{"body left unread", "POST /p?read=2 HTTP/1.1\r\nHost: h\r\nContent-Length: 6\r\n\r\nabcdefGET /n HTTP/1.1\r\nHost: h\r\n\r\n", []string{"POST", "GET"}},
	{"head", "HEAD /h HTTP/1.1\r\nHost: h\r\n\r\n", []string{"HEAD"}},
	{"head with length", "HEAD /h?cl=1 HTTP/1.1\r\nHost: h\r\n\r\nGET /x HTTP/1.1\r\nHost: h\r\n\r\n", []string{"HEAD", "GET"}},
	{"connection close", "GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", []string{"GET"}},
	{"connection keep-alive", "GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\n\r\n", []string{"GET"}},
	{"options", "OPTIONS /o HTTP/1.1\r\nHost: h\r\n\r\n", []string{"OPTIONS"}},
	{"delete", "DELETE /d HTTP/1.1\r\nHost: h\r\n\r\n", []string{"DELETE"}},
	{"encoded path and query", "GET /a%20b/c?q=%41;x=1&y=%zz HTTP/1.1\r\nHost: h\r\n\r\n", []string{"GET"}},
	{"host with port", "GET / HTTP/1.1\r\nHost: sbx-1.preview.example:8443\r\n\r\n", []string{"GET"}},
	{"empty value", "GET / HTTP/1.1\r\nHost: h\r\nX-Empty:\r\nX-Spaces:   \t v \t\r\n\r\n", []string{"GET"}},
	// Answers of every shape.
	{"long body chunked", "GET /?n=3000 HTTP/1.1\r\nHost: h\r\n\r\nGET /?n=10 HTTP/1.1\r\nHost: h\r\n\r\n", []string{"GET", "GET"}},
	{"declared length", "GET /?n=3000&cl=1 HTTP/1.1\r\nHost: h\r\n\r\n", []string{"GET"}},
	{"flushed", "GET /?n=10&flush=1 HTTP/1.1\r\nHost: h\r\n\r\nGET /n HTTP/1.1\r\nHost: h\r\n\r\n", []string{"GET", "GET"}},
	{"flushed with length", "GET /?n=10&flush=1&cl=1 HTTP/1.1\r\nHost: h\r\n\r\n", []string{"GET"}},
	{"trailers", "GET /?trailer=1 HTTP/1.1\r\nHost: h\r\n\r\nGET /n HTTP/1.1\r\nHost: h\r\n\r\n", []string{"GET", "GET"}},
	{"no content", "GET /?status=204 HTTP/1.1\r\nHost: h\r\n\r\nGET /n HTTP/1.1\r\nHost: h\r\n\r\n", []string{"GET", "GET"}},
	{"not modified", "GET /?status=304 HTTP/1.1\r\nHost: h\r\n\r\n", []string{"GET"}},
	{"not found", "GET /?status=404&n=0 HTTP/1.1\r\nHost: h\r\n\r\n", []string{"GET"}},
	{"odd status", "GET /?status=599 HTTP/1.1\r\nHost: h\r\n\r\n", []string{"GET"}},
	{"sniffed type", "GET /?ct=none&n=20 HTTP/1.1\r\nHost: h\r\n\r\n", []string{"GET"}},
	{"sniff of a long body", "GET /?ct=none&n=5000 HTTP/1.1\r\nHost: h\r\n\r\n", []string{"GET"}},
	{"empty untyped", "GET /?ct=none&n=0 HTTP/1.1\r\nHost: h\r\n\r\n", []string{"GET"}},
	{"short answer", "GET /?short=1 HTTP/1.1\r\nHost: h\r\n\r\n", []string{"GET"}},
	{"early hints", "GET /?info=1 HTTP/1.1\r\nHost: h\r\n\r\n", []string{"GET", "GET"}},
	{"panic", "GET /?panic=1 HTTP/1.1\r\nHost: h\r\n\r\n", []string{"GET"}},
	{"abort", "GET /?abort=1 HTTP/1.1\r\nHost: h\r\n\r\n", []string{"GET"}},
	// Not plain: net/http serves them, from the first byte or mid-way.
	{"chunked body", "POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", []string{"POST"}},
	{"plain then chunked", "GET /1 HTTP/1.1\r\nHost: h\r\n\r\nPOST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nz\r\n0\r\n\r\nGET /3 HTTP/1.1\r\nHost: h\r\n\r\n", []string{"GET", "POST", "GET"}},
	{"bare LF", "GET / HTTP/1.1\nHost: h\n\n", []string{"GET"}},
	{"bare LF after CRLF", "GET / HTTP/1.1\r\nHost: h\nX: 1\r\n\r\n", []string{"GET"}},
	{"upgrade", "GET /ws HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", []string{"GET"}},
	{"folded", "GET / HTTP/1.1\r\nHost: h\r\nX-Fold: a\r\n b\r\n\r\n", []string{"GET"}},
	{"two hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", []string{"GET"}},
	{"no host", "GET / HTTP/1.1\r\nX: 1\r\n\r\n", []string{"GET"}},
	{"empty host", "GET / HTTP/1.1\r\nHost:\r\n\r\n", []string{"GET"}},
	{"bad host", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", []string{"GET"}},
	{"absolute form", "GET http://other/x HTTP/1.1\r\nHost: h\r\n\r\n", []string{"GET"}},
	{"asterisk", "OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n", []string{"OPTIONS"}},
	{"space in name", "GET / HTTP/1.1\r\nHost: h\r\nX Y: 1\r\n\r\n", []string{"GET"}},
	{"space before colon", "GET / HTTP/1.1\r\nHost: h\r\nX-Y : 1\r\n\r\n", []string{"GET"}},
	{"big body", "POST /b HTTP/1.1\r\nHost: h\r\nContent-Length: 40000\r\n\r\n" + strings.Repeat("b", 40000), []string{"POST"}},
	{"two lengths", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", []string{"POST"}},
	{"bad length", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n", []string{"POST"}},
	{"http 1.0", "GET / HTTP/1.0\r\nHost: h\r\n\r\n", []string{"GET"}},
	{"expect", "POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi", []string{"POST"}},
	{"raw bytes in value", "GET / HTTP/1.1\r\nHost: h\r\nX: caf\xc3\xa9\r\n\r\n", []string{"GET"}},
	{"control in value", "GET / HTTP/1.1\r\nHost: h\r\nX: a\x01b\r\n\r\n", []string{"GET"}},
	{"unknown method", "BREW /pot HTTP/1.1\r\nHost: h\r\n\r\n", []string{"BREW"}},
	{"connect", "CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n", []string{"CONNECT"}},
	{"h2c preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", []string{"GET"}},
	{"garbage", "\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\r\n\r\n", []string{"GET"}},
	{"huge head", "GET / HTTP/1.1\r\nHost: h\r\nCookie: " + strings.Repeat("c", 6000) + "\r\n\r\n", []string{"GET"}},
	{"leading blank line", "\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n", []string{"GET"}},
	{"fragment", "GET /a#frag HTTP/1.1\r\nHost: h\r\n\r\n", []string{"GET"}},
	// Heads that never end, after a first request: both servers give up
	// at the header timeout, once (the lean loop hands net/http the
	// timeout it hit, not a fresh one).
	{"unfinished head", "GET /1 HTTP/1.1\r\nHost: h\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n", []string{"GET", "GET"}},
	{"bad line in unfinished head", "GET /1 HTTP/1.1\r\nHost: h\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\xc1\r\n", []string{"GET", "GET"}},
	{"bad request line in unfinished head", "GET /1 HTTP/1.1\r\nHost: h\r\n\r\nGET /n HTT HTTP/1.1\r\n: h\r\n", []string{"GET", "GET"}},
	{"double slash", "GET //evil/x HTTP/1.1\r\nHost: h\r\n\r\n", []string{"GET"}},
}

// TestParity: every case gets, from the lean server, the very answers
// (status, headers but Date, body, trailers, and whether the connection
// stays open) that net/http gives.
func TestParity(t *testing.T) {
	lean, std := servers(t, echo)
	// The exchanges mostly wait (for a connection to stay open); all of
	// them run at once.
	got, want := make([]string, len(parityCases)), make([]string, len(parityCases))
	var wg sync.WaitGroup
	for i, tc := range parityCases {
		wg.Go(func() { want[i] = exchange(t, std, tc.raw, tc.methods) })
		wg.Go(func() { got[i] = exchange(t, lean, tc.raw, tc.methods) })
	}
	wg.Wait()
	for i, tc := range parityCases {
		if got[i] != want[i] {
			t.Errorf("%s: lean server answered\n%s\nnet/http answered\n%s", tc.name, got[i], want[i])
		}
	}
}

// TestHeadInPieces: a head that comes in two pieces, the second with a
// line the lean loop leaves to net/http, is answered as net/http answers
// it, and by the header timeout counted from the head's first byte: the
// connection handed over keeps that deadline, it does not get a fresh
// one from the bad line.
func TestHeadInPieces(t *testing.T) {
	lean, std := servers(t, echo)
	send := func(addr string) string {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return "dial: " + err.Error()
		}
		defer c.Close()
		start := time.Now()
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: h\r\n"); err != nil {
			return "write: " + err.Error()
		}
		// The pause is the client's pace, not a wait for the server: the
		// second piece comes late in the header timeout, so a fresh
		// timeout from it would run past settle.
		time.Sleep(hdrTimeout - 50*time.Millisecond)
		if _, err := io.WriteString(c, "X Y: 1\r\n"); err != nil {
			return "write: " + err.Error()
		}
		_ = c.SetReadDeadline(start.Add(settle))
		b, err := io.ReadAll(c)
		var ne net.Error
		return fmt.Sprintf("%q open=%v", b, errors.As(err, &ne) && ne.Timeout())
	}
	var got, want string
	var wg sync.WaitGroup
	wg.Go(func() { want = send(std) })
	wg.Go(func() { got = send(lean) })
	wg.Wait()
	if !strings.HasSuffix(want, "open=false") {
		t.Fatalf("net/http answered %s; want the connection closed by its header timeout", want)
	}
	if got != want {
		t.Errorf("lean server answered %s; net/http %s", got, want)
	}
}

func FuzzParity(f *testing.F) {
	// TestParity runs every case; a few seed the fuzzer's shapes.
	for _, tc := range parityCases {
		switch tc.name {
		case "pipelined", "body left unread", "plain then chunked", "trailers", "bare LF":
			f.Add(tc.raw)
		}
	}
	f.Fuzz(func(t *testing.T, raw string) {
		lean, std := servers(t, echo)
		m := "GET"
		if strings.HasPrefix(raw, "HEAD") {
			m = "HEAD"
		}
		methods := []string{m, m, m}
		var got, want string
		var wg sync.WaitGroup
		wg.Go(func() { want = exchange(t, std, raw, methods) })
		wg.Go(func() { got = exchange(t, lean, raw, methods) })
		wg.Wait()
		if got != want {
			t.Errorf("for %q the lean server answered\n%s\nnet/http answered\n%s", raw, got, want)
		}
	})
}
