package preview

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"
)

// The lean relay carries plain HTTP/1.x requests (no upgrade, a body of
// at most maxLeanBody bytes with a declared length) to the sandbox on a
// pooled direct-tcpip channel: it writes the request head itself, reads
// the answer with readAnswer (http.ReadResponse for any head not of the
// plain shape) and copies the body with pooled
// buffers, in the handler's goroutine. httputil.ReverseProxy with
// http.Transport, which hands every request to two more goroutines per
// connection and clones it twice, stays for WebSockets, HTTP/2 and
// streamed or large request bodies.
//
// What reaches the sandbox and the client is what the ReverseProxy path
// gives for the same request (FuzzRelayParity compares the two): the same
// header rules (hop-by-hop headers removed, forwarding and credential
// headers from forwardHeaders, the Host), the same query cleaning, the
// same response rules (modifyResponse), 1xx relaying, trailers, flushing
// of streamed answers, and the same errors.

// maxLeanBody is the largest request body the lean relay takes: read
// whole before the request is written, it fits one copy buffer and the
// channel's window, so writing never waits on the app.
const maxLeanBody = 32 << 10

// responseHeaderTimeout bounds the wait for an answer's head, as the
// Transport's ResponseHeaderTimeout does on the other path: dev servers
// may take long to answer a first request (a cold bundler), but not
// forever.
const responseHeaderTimeout = 5 * time.Minute

// errHeadTimeout is an answer's head not back within
// responseHeaderTimeout: the app is slow, not the channel stale, so the
// request is not sent again.
var errHeadTimeout = errors.New("timeout awaiting response headers")

// max1xx is how many informational answers one request may get before
// the upstream is treated as broken (the Transport's limit).
const max1xx = 5

// leanEligible reports whether r may take the lean relay.
func (p *Proxy) leanEligible(r *http.Request) bool {
	return !p.cfg.DisableLeanRelay && r.ProtoMajor == 1 &&
		len(r.Header["Upgrade"]) == 0 && len(r.TransferEncoding) == 0 &&
		r.ContentLength >= 0 && r.ContentLength <= maxLeanBody
}

// hopHeaders are the hop-by-hop headers (RFC 9110 7.6.1, and the older
// ones still sent) that never pass the proxy, in either direction.
var hopHeaders = [...]string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// removeHopByHop deletes the hop-by-hop headers and those the Connection
// header names.
func removeHopByHop(h http.Header) {
	for _, line := range h["Connection"] {
		for name := range strings.SplitSeq(line, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	if len(h) >= len(hopHeaders) {
		for _, name := range hopHeaders {
			delete(h, name)
		}
		return
	}
	// Fewer keys than hop-by-hop names (an answer's head, mostly): look
	// at each key rather than hash every name.
	for k := range h {
		if isHopHeader(k) {
			delete(h, k)
		}
	}
}

// isHopHeader reports whether the canonical key k is one of hopHeaders.
func isHopHeader(k string) bool {
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
		"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// cleanQuery re-encodes a query that a Go server would not parse as
// written (a ";" separator, a broken escape), so the app cannot read it
// differently from how the proxy's rules did; others pass untouched.
func cleanQuery(q string) string {
	for i := 0; i < len(q); i++ {
		switch {
		case q[i] == ';':
		case q[i] == '%' && (i+2 >= len(q) || !isHex(q[i+1]) || !isHex(q[i+2])):
		default:
			if q[i] == '%' {
				i += 2
			}
			continue
		}
		v, _ := url.ParseQuery(q)
		return v.Encode()
	}
	return q
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// requestExclude are the headers the request head writes itself, or
// never from the header map, as http.Request.Write does.
var requestExclude = map[string]bool{
	"Host": true, "User-Agent": true, "Content-Length": true, "Transfer-Encoding": true, "Trailer": true,
}

// headNewlines turns line breaks in header values into spaces.
var headNewlines = strings.NewReplacer("\n", " ", "\r", " ")

// writeHead writes r's request line and the headers h, with host as
// Host, as http.Request.Write would.
func writeHead(bw *bufio.Writer, r *http.Request, host string, h http.Header) error {
	u := *r.URL
	u.RawQuery = cleanQuery(u.RawQuery)
	bw.WriteString(r.Method)
	bw.WriteByte(' ')
	bw.WriteString(u.RequestURI())
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(host)
	bw.WriteString("\r\n")
	// The first User-Agent only; none when the client sent none.
	if ua := h.Get("User-Agent"); ua != "" {
		bw.WriteString("User-Agent: ")
		bw.WriteString(textproto.TrimString(headNewlines.Replace(ua)))
		bw.WriteString("\r\n")
	}
	switch m := r.Method; {
	case r.ContentLength > 0:
		bw.WriteString("Content-Length: ")
		bw.WriteString(strconv.FormatInt(r.ContentLength, 10))
		bw.WriteString("\r\n")
	case m == http.MethodPost || m == http.MethodPut || m == http.MethodPatch:
		// Servers expect a length on these even when it is zero.
		bw.WriteString("Content-Length: 0\r\n")
	}
	if err := h.WriteSubset(bw, requestExclude); err != nil {
		return err
	}
	_, err := bw.WriteString("\r\n")
	return err
}

// leanRelay relays r, for the request's upstreamCall up, on a pooled
// channel and writes the answer to w. ctx is the tracked request's: its
// end (a revoke, the client gone) closes the channel.
func (p *Proxy) leanRelay(ctx context.Context, w http.ResponseWriter, r *http.Request, up *upstreamCall) {
	var body []byte
	if r.ContentLength > 0 {
		bp := copyBufferPool.Get().(*[]byte)
		defer copyBufferPool.Put(bp)
		body = (*bp)[:r.ContentLength]
		if _, err := io.ReadFull(up.body, body); err != nil {
			p.relayError(w, r, up, fmt.Errorf("read request body: %w", err))
			return
		}
	}
	oh := outHeader(r.Header)
	defer putOutHeader(oh)
	h := oh.h
	removeHopByHop(h)
	if httpguts.HeaderValuesContainsToken(r.Header["Te"], "trailers") {
		h.Set("Te", "trailers")
	}
	p.forwardHeaders(h, r, &oh.fwd)
	host := outboundHost(r, up.route)

	c, stop, resp, err := p.roundTrip(ctx, w, r, up, host, h, body)
	if err != nil {
		if ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		p.relayError(w, r, up, err)
		return
	}
	// From here c is ours to close or pool; stop tells whether ctx's end
	// closed it already.
	reusable := false
	defer func() {
		if stop() && reusable {
			p.pool.put(c)
			return
		}
		_ = c.Close()
	}()

	removeHopByHop(resp.Header)
	p.answerRules(resp.Header, up)
	moveHeader(w.Header(), resp.Header)
	dst := w.Header()
	announced := len(resp.Trailer)
	if announced > 0 {
		keys := make([]string, 0, announced)
		for k := range resp.Trailer {
			keys = append(keys, k)
		}
		dst.Add("Trailer", strings.Join(keys, ", "))
	}
	w.WriteHeader(resp.StatusCode)

	if err := p.copyBody(w, resp, c); err != nil {
		// The head is out: all that is left is to cut the client off.
		if p.log.Enabled(ctx, slog.LevelDebug) {
			p.log.DebugContext(ctx, "preview response copy ended", "sandbox_id", up.route.SandboxID, "err", err)
		}
		panic(http.ErrAbortHandler)
	}
	// Bytes past the answer mean the app and the proxy no longer agree
	// on where answers end: the channel is not used again.
	reusable = !resp.Close && c.br.Buffered() == 0
	if len(resp.Trailer) > 0 {
		// Chunked, so that the trailers can follow.
		_ = http.NewResponseController(w).Flush()
	}
	if len(resp.Trailer) == announced {
		for k, vv := range resp.Trailer {
			dst[k] = append(dst[k], vv...)
		}
		return
	}
	for k, vv := range resp.Trailer {
		for _, v := range vv {
			dst.Add(http.TrailerPrefix+k, v)
		}
	}
}

// outHeaders recycles the maps of outgoing request headers.
var outHeaders = sync.Pool{New: func() any { return &outHead{h: http.Header{}} }}

// outHead is an outgoing request's header map, with the array its
// forwarding headers' values live in.
type outHead struct {
	h   http.Header
	fwd [3]string
}

// outHeader returns a copy of in for the outgoing request, from
// outHeaders. It shares in's value slices: the rules applied to it
// delete keys and set fresh slices, never write into a slice, so in is
// left as it was, as a Clone would leave it.
func outHeader(in http.Header) *outHead {
	oh := outHeaders.Get().(*outHead)
	for k, vv := range in {
		oh.h[k] = vv
	}
	return oh
}

// putOutHeader returns oh to outHeaders once the head is written.
func putOutHeader(oh *outHead) {
	clear(oh.h)
	oh.fwd = [3]string{}
	outHeaders.Put(oh)
}

// roundTrip writes the request on a pooled channel (or a new one) and
// reads the answer's head, relaying informational answers to w. A pooled
// channel that fails before a byte of answer is back has gone stale (the
// app closed it while idle, or restarted): the request goes once more on
// a new channel, whatever its method, as browsers do. stop unregisters
// the close of c at ctx's end, and reports whether it had not happened.
func (p *Proxy) roundTrip(ctx context.Context, w http.ResponseWriter, r *http.Request, up *upstreamCall, host string, h http.Header, body []byte) (c *upConn, stop func() bool, resp *http.Response, err error) {
	for {
		if c = p.pool.get(up.key); c == nil {
			conn, err := p.dialRoute(ctx, up.route, up.key)
			if err != nil {
				return nil, nil, nil, err
			}
			c = newUpConn(conn, up.key)
		}
		stop = context.AfterFunc(ctx, c.closeFn)
		resp, err = p.exchange(w, c, r, host, h, body)
		if err == nil {
			return c, stop, resp, nil
		}
		stop()
		_ = c.Close()
		if !c.used || c.read > 0 || ctx.Err() != nil || errors.Is(err, errHeadTimeout) {
			return nil, nil, nil, err
		}
		p.pool.drop(up.key)
	}
}

// exchange sends the request on c and reads the head of the final
// answer. The head taking past responseHeaderTimeout closes c.
func (p *Proxy) exchange(w http.ResponseWriter, c *upConn, r *http.Request, host string, h http.Header, body []byte) (*http.Response, error) {
	// One timer per channel, re-armed per request, not one per request.
	if c.headTimer == nil {
		c.headTimer = time.AfterFunc(responseHeaderTimeout, func() { _ = c.Close() })
	} else {
		c.headTimer.Reset(responseHeaderTimeout)
	}
	timer := c.headTimer
	defer timer.Stop()

	if err := writeHead(c.bw, r, host, h); err != nil {
		return nil, fmt.Errorf("write request head: %w", err)
	}
	_, _ = c.bw.Write(body)
	if err := c.bw.Flush(); err != nil {
		return nil, fmt.Errorf("write request: %w", err)
	}
	c.limit = maxResponseHead
	for n := 0; ; n++ {
		resp, err := readAnswer(c, r)
		if err != nil {
			if !timer.Stop() {
				err = fmt.Errorf("%w: %w", errHeadTimeout, err)
			}
			return nil, fmt.Errorf("read response head: %w", err)
		}
		switch code := resp.StatusCode; {
		case code == http.StatusSwitchingProtocols:
			return nil, fmt.Errorf("backend tried to switch protocol %q when none was requested", resp.Header.Get("Upgrade"))
		case code >= 100 && code < 200:
			if n >= max1xx {
				return nil, errors.New("too many 1xx informational responses")
			}
			dst := w.Header()
			moveHeader(dst, resp.Header)
			w.WriteHeader(code)
			clear(dst)
			continue
		}
		c.limit = 0
		return resp, nil
	}
}

// moveHeader adds src's values to dst. src is an answer's head, read
// for this request and not used after: a key dst lacks takes src's
// slice as it is, without a copy.
func moveHeader(dst, src http.Header) {
	for k, vv := range src {
		if old, ok := dst[k]; ok {
			dst[k] = append(old, vv...)
		} else {
			dst[k] = vv
		}
	}
}

// eventStream is the type of server-sent events, streamed as they come.
const eventStream = "text/event-stream"

// copyBody copies the answer's body to w.
func (p *Proxy) copyBody(w http.ResponseWriter, resp *http.Response, c *upConn) error {
	rc := http.NewResponseController(w)
	stream := resp.ContentLength == -1
	if ct := resp.Header.Get("Content-Type"); !stream && len(ct) >= len(eventStream) && strings.EqualFold(ct[:len(eventStream)], eventStream) {
		// Parsed only when it may be one: as the ReverseProxy decides.
		base, _, _ := mime.ParseMediaType(ct)
		stream = base == eventStream
	}
	if stream {
		// The head goes out now, before a body that may take its time
		// (and without a type sniffed from its first bytes).
		if err := rc.Flush(); err != nil {
			return err
		}
	}
	bp := copyBufferPool.Get().(*[]byte)
	defer copyBufferPool.Put(bp)
	buf := *bp
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			// Streamed answers are flushed after every write, the last
			// too (it decides the client's framing: chunked, as on the
			// ReverseProxy path); others when the upstream has nothing
			// more buffered and the body has more to come.
			if stream || rerr == nil && c.br.Buffered() == 0 {
				if err := rc.Flush(); err != nil {
					return err
				}
			}
		}
		if rerr == io.EOF {
			return resp.Body.Close()
		}
		if rerr != nil {
			return rerr
		}
	}
}
