package preview

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"
)

// upConn is one upstream connection of the lean relay (a direct-tcpip
// channel into the sandbox) with the buffers that live as long as it.
// One request uses it at a time; between requests it sits in upPool.
type upConn struct {
	net.Conn
	key  string
	br   *bufio.Reader
	bw   *bufio.Writer
	used bool // has carried a request before: it may have gone stale

	// read counts bytes read since the request began, so a stale
	// channel (the app closed it while idle) is told from an app that
	// answered. limit, when positive, bounds what the response head may
	// take (http.Transport's MaxResponseHeaderBytes, in effect).
	read  int64
	limit int64

	idleSince time.Time

	// headTimer closes the channel when an answer's head takes past
	// responseHeaderTimeout; made on the first request, re-armed by the
	// next ones.
	headTimer *time.Timer

	// closeFn closes the connection: made once, for the context.AfterFunc
	// of each request, rather than a closure (and a heap copy of the
	// variable it closes over) per request.
	closeFn func()

	// resp and body are the answer being relayed, when readAnswer read
	// it (one request at a time: reused, resp.Header's map included).
	resp http.Response
	body answerBody
}

// errHeadTooLarge is a response head past maxResponseHead.
var errHeadTooLarge = errors.New("preview: upstream response head too large")

// maxResponseHead bounds an upstream's status line and headers, as
// http.Transport does by default.
const maxResponseHead = 10 << 20

func (c *upConn) Read(p []byte) (int, error) {
	if c.limit > 0 {
		if c.read >= c.limit {
			return 0, errHeadTooLarge
		}
		p = p[:min(int64(len(p)), c.limit-c.read)]
	}
	n, err := c.Conn.Read(p)
	c.read += int64(n)
	return n, err
}

// upPool keeps idle upstream connections per pool key (one exposed port
// of one incarnation of a sandbox, see upstreamKey), most recently used
// first. Connections idle past idleTimeout are closed on the way out and
// by prune.
type upPool struct {
	maxPerKey   int
	idleTimeout time.Duration
	now         func() time.Time

	mu     sync.Mutex // guards idle and closed
	idle   map[string][]*upConn
	closed bool
}

func newUpPool(maxPerKey int, idleTimeout time.Duration, now func() time.Time) *upPool {
	return &upPool{maxPerKey: maxPerKey, idleTimeout: idleTimeout, now: now, idle: map[string][]*upConn{}}
}

// get takes the most recently used idle connection for key, or nil.
func (p *upPool) get(key string) *upConn {
	now := p.now()
	var stale []*upConn
	var c *upConn
	p.mu.Lock()
	l := p.idle[key]
	for len(l) > 0 {
		c, l = l[len(l)-1], l[:len(l)-1]
		if now.Sub(c.idleSince) < p.idleTimeout {
			break
		}
		stale, c = append(stale, c), nil
	}
	if len(l) == 0 {
		delete(p.idle, key)
	} else {
		p.idle[key] = l
	}
	p.mu.Unlock()
	for _, s := range stale {
		_ = s.Close()
	}
	return c
}

// newUpConn wraps a new upstream connection for the pool key.
func newUpConn(conn net.Conn, key string) *upConn {
	c := &upConn{Conn: conn, key: key}
	c.closeFn = func() { _ = c.Close() }
	c.br, c.bw = bufio.NewReaderSize(c, 4<<10), bufio.NewWriterSize(conn, 4<<10)
	return c
}

// adopt pools a connection that was opened for something else (a wake's
// probe of the port) for the next request to key. It counts as used, so
// a request that finds it already closed by the app goes again on a new
// one.
func (p *upPool) adopt(conn net.Conn, key string) {
	p.put(newUpConn(conn, key))
}

// put returns c for reuse, or closes it when the pool is full or closed.
func (p *upPool) put(c *upConn) {
	c.used, c.idleSince, c.read, c.limit = true, p.now(), 0, 0
	// Neither the last answer's head nor its request kept alive while
	// idle; the map is kept for the next answer unless it grew large.
	h := c.resp.Header
	if len(h) > maxKeptKeys {
		h = nil
	}
	clear(h)
	c.resp = http.Response{Header: h}
	p.mu.Lock()
	if p.closed || len(p.idle[c.key]) >= p.maxPerKey {
		p.mu.Unlock()
		_ = c.Close()
		return
	}
	p.idle[c.key] = append(p.idle[c.key], c)
	p.mu.Unlock()
}

// drop closes every idle connection of key: one of them went stale (the
// app closed it while idle, or restarted), and the older ones are likely
// to have gone the same way.
func (p *upPool) drop(key string) {
	p.mu.Lock()
	l := p.idle[key]
	delete(p.idle, key)
	p.mu.Unlock()
	for _, c := range l {
		_ = c.Close()
	}
}

// prune closes the connections idle past idleTimeout, so the pools of
// ports and sandboxes no longer visited do not keep channels open.
func (p *upPool) prune() {
	now := p.now()
	var stale []*upConn
	p.mu.Lock()
	for k, l := range p.idle {
		keep := l[:0]
		for _, c := range l {
			if now.Sub(c.idleSince) < p.idleTimeout {
				keep = append(keep, c)
			} else {
				stale = append(stale, c)
			}
		}
		if len(keep) == 0 {
			delete(p.idle, k)
		} else {
			clear(l[len(keep):])
			p.idle[k] = keep
		}
	}
	p.mu.Unlock()
	for _, c := range stale {
		_ = c.Close()
	}
}

// close closes every idle connection; later puts close theirs.
func (p *upPool) close() {
	p.mu.Lock()
	p.closed = true
	all := p.idle
	p.idle = map[string][]*upConn{}
	p.mu.Unlock()
	for _, l := range all {
		for _, c := range l {
			_ = c.Close()
		}
	}
}
