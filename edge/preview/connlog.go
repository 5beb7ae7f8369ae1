package preview

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/sbxedge/sbx/internal/connlog"
)

// The connection log counts a preview per browser session, not per
// request: requests from one client (its address and user agent) with one
// grant on one preview host are one connection, open while requests or
// WebSockets are in flight and until SessionIdle passes without any.

// browserSessions are the preview connections being recorded.
type browserSessions struct {
	rec  *connlog.Recorder
	idle time.Duration
	now  func() time.Time

	mu sync.Mutex
	m  map[string]*browserSession
}

type browserSession struct {
	c        *connlog.Conn
	inflight int
	last     time.Time
}

func newBrowserSessions(rec *connlog.Recorder, idle time.Duration, now func() time.Time) *browserSessions {
	return &browserSessions{rec: rec, idle: idle, now: now, m: make(map[string]*browserSession)}
}

// begin counts a request of the session it belongs to, opening the
// session's record if it is new; end (called once the request and any
// WebSocket it became are over) counts its bytes.
func (b *browserSessions) begin(r *http.Request, label string, rt Route, g grant) (end func(in, out int64)) {
	if b.rec == nil {
		return func(int64, int64) {}
	}
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	ua := r.UserAgent()
	cred := g.credential(rt)
	// The secret of a token grant is hashed into the key, never kept.
	sum := sha256.Sum256([]byte(label + "\x00" + host + "\x00" + ua + "\x00" + cred + "\x00" + g.secret))
	key := hex.EncodeToString(sum[:16])
	b.mu.Lock()
	s, ok := b.m[key]
	if !ok {
		s = &browserSession{c: b.rec.Open(connlog.Record{
			SandboxID: rt.SandboxID, Kind: connlog.KindPreview, Credential: cred, ClientAddr: host,
			ClientKind:   connlog.Detect(connlog.Signals{Explicit: r.Header.Get(connlog.HeaderClient), UserAgent: ua}),
			ClientDetail: ua,
		})}
		b.m[key] = s
	}
	s.inflight++
	s.last = b.now()
	b.mu.Unlock()
	return func(in, out int64) {
		s.c.AddIn(in)
		s.c.AddOut(out)
		b.mu.Lock()
		s.inflight--
		s.last = b.now()
		b.mu.Unlock()
	}
}

// sweep ends the sessions idle for longer than the idle period.
func (b *browserSessions) sweep() {
	now := b.now()
	b.mu.Lock()
	var ended []*browserSession
	for k, s := range b.m {
		if s.inflight == 0 && now.Sub(s.last) >= b.idle {
			delete(b.m, k)
			ended = append(ended, s)
		}
	}
	b.mu.Unlock()
	for _, s := range ended {
		s.c.Close(connlog.EndClosed)
	}
}

// run sweeps every fraction of the idle period until ctx ends, then ends
// every session: the proxy is closing.
func (b *browserSessions) run(ctx context.Context) {
	t := time.NewTicker(max(b.idle/4, 100*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			b.mu.Lock()
			all := b.m
			b.m = make(map[string]*browserSession)
			b.mu.Unlock()
			for _, s := range all {
				s.c.Close(connlog.EndShutdown)
			}
			return
		case <-t.C:
			b.sweep()
		}
	}
}

// credential names what admitted a request, never a secret: the
// signed-in identity, the account whose token it was, or "public".
func (g grant) credential(rt Route) string {
	switch g.kind {
	case grantSession:
		return g.id.Issuer + "#" + g.id.Subject
	case grantToken:
		return "account-token:" + rt.AccountID
	}
	return "public"
}
