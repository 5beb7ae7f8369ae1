package api

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/sbxedge/sbx/control/mcpserver"
	"github.com/sbxedge/sbx/internal/connlog"
)

// The connection log counts MCP the way the edge counts previews: per
// session, not per request. /mcp is stateless (any replica answers any
// request), so a session is what the requests show: those of one token
// from one client address and user agent, until MCPSessionIdle passes
// without one. Its client kind is read from the clientInfo the client
// sends: in initialize, or (the stateless protocol of 2026, SEP-2575) in
// every request's _meta.
//
// A connection row names a sandbox (sandbox_id is NOT NULL and references
// sandboxes, migration 0016; the API lists rows per sandbox and the
// account a row belongs to is its sandbox's), while an MCP session spans
// an account. Rather than loosen the schema, a session is recorded as one
// row per sandbox it acts on, opened at its first tool call naming that
// sandbox: a session that only lists or creates sandboxes leaves no row.

// mcpSessions are the MCP sessions being recorded.
type mcpSessions struct {
	s    *Server
	idle time.Duration

	mu sync.Mutex
	m  map[mcpKey]*mcpSession
}

type mcpKey struct{ token, host, ua string }

type mcpSession struct {
	kind, detail string
	conns        map[string]*connlog.Conn // by sandbox ID
	inflight     int
	last         time.Time
}

func newMCPSessions(s *Server, idle time.Duration) *mcpSessions {
	return &mcpSessions{s: s, idle: idle, m: make(map[mcpKey]*mcpSession)}
}

// observe counts a message of the session it belongs to (mcpserver's
// Observe): clientInfo names the client, a tool call naming a sandbox of
// the caller's account opens that sandbox's row. done ends the request.
func (p *mcpSessions) observe(r *http.Request, m mcpserver.Message) (done func()) {
	if p.s.conns == nil {
		return func() {}
	}
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	ua := r.UserAgent()
	key := mcpKey{callerID(r), host, ua}
	sandboxID := m.SandboxID
	p.mu.Lock()
	known := false
	if s := p.m[key]; s != nil {
		_, known = s.conns[sandboxID]
	}
	p.mu.Unlock()
	if sandboxID != "" && !known {
		// Only a sandbox the caller may see gets a row: the row is
		// listed to the sandbox's account. A name is resolved to its ID.
		sandboxID = ""
		if sb, err := p.s.life.Resolve(r.Context(), account(r), m.SandboxID); err == nil {
			sandboxID = sb.ID
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.m[key]
	if !ok {
		s = &mcpSession{conns: make(map[string]*connlog.Conn)}
		s.kind = connlog.Detect(connlog.Signals{Explicit: r.Header.Get(connlog.HeaderClient), UserAgent: ua})
		s.detail = ua
		p.m[key] = s
	}
	if m.ClientName != "" && m.ClientName+"/"+m.ClientVersion != s.detail {
		s.kind = connlog.Detect(connlog.Signals{Explicit: r.Header.Get(connlog.HeaderClient), MCPClient: m.ClientName})
		s.detail = m.ClientName + "/" + m.ClientVersion
		for _, c := range s.conns {
			c.SetClient(s.kind, s.detail)
		}
	}
	c := s.conns[sandboxID]
	if sandboxID != "" && c == nil {
		c = p.s.conns.Open(connlog.Record{
			SandboxID: sandboxID, Kind: connlog.KindMCP, Credential: key.token, ClientAddr: host,
			ClientKind: s.kind, ClientDetail: s.detail,
		})
		s.conns[sandboxID] = c
	}
	c.AddIn(int64(m.Size))
	s.inflight++
	s.last = p.s.now()
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		s.inflight--
		s.last = p.s.now()
	}
}

// sweep ends the sessions idle for longer than the idle period.
func (p *mcpSessions) sweep() {
	now := p.s.now()
	p.mu.Lock()
	var ended []*mcpSession
	for k, s := range p.m {
		if s.inflight == 0 && now.Sub(s.last) >= p.idle {
			delete(p.m, k)
			ended = append(ended, s)
		}
	}
	p.mu.Unlock()
	for _, s := range ended {
		for _, c := range s.conns {
			c.Close(connlog.EndIdle)
		}
	}
}

// RunMCPSessions ends idle MCP sessions every fraction of the idle period
// until ctx ends. Sessions still open then are ended by the recorder's
// own Run, as shutdown.
func (s *Server) RunMCPSessions(ctx context.Context) {
	t := time.NewTicker(max(s.mcpSessions.idle/4, 100*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.mcpSessions.sweep()
		}
	}
}
