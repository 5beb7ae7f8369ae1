package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/go-chi/chi/v5"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/internal/connlog"
	"github.com/sbxedge/sbx/internal/jsonbody"
	"github.com/sbxedge/sbx/internal/podssh"
	"github.com/sbxedge/sbx/internal/problem"
)

// The terminal stream, GET /api/v1/sandboxes/{id}/exec/stream, is a
// WebSocket carrying one command on a pseudo-terminal (openapi.json
// documents the protocol):
//
//	client → server: binary frames are keys typed (stdin); text frames are
//	  JSON: {"type":"stdin","data":"..."}, {"type":"resize","cols":C,"rows":R},
//	  {"type":"signal","signal":"INT"}.
//	server → client: binary frames are terminal output; the last text frame
//	  is {"type":"exit","exit_code":N,"signal":null|"KILL"}, or
//	  {"type":"error","problem":{...}} when the command could not run.
//
// It authenticates like the REST API (bearer token) or, for browsers, with
// a ticket from POST …/exec/stream/tickets; a browser's Origin must be the
// API's own or one of Config.StreamOrigins.

var errOriginRefused = problem.New(http.StatusForbidden, "origin_not_allowed",
	"this Origin may not open terminal streams; serve the page from an allowed origin (StreamOrigins)")

// ptyMessage is a text frame of the terminal stream, either way.
type ptyMessage struct {
	Type     string           `json:"type"`
	Data     string           `json:"data,omitempty"`
	Cols     int              `json:"cols,omitempty"`
	Rows     int              `json:"rows,omitempty"`
	Signal   *string          `json:"signal,omitempty"`
	ExitCode *int             `json:"exit_code,omitempty"`
	Problem  *problem.Problem `json:"problem,omitempty"`
}

// execStreamAuth authenticates the stream with the bearer token when one
// is sent, else with a ticket.
func (s *Server) execStreamAuth(w http.ResponseWriter, r *http.Request) {
	if !s.originAllowed(r) {
		writeProblem(w, r, errOriginRefused)
		return
	}
	tk := r.URL.Query().Get("ticket")
	if _, ok := bearer(r); ok || tk == "" {
		s.authenticate(http.HandlerFunc(s.execStream)).ServeHTTP(w, r)
		return
	}
	c, err := s.redeemTicket(r.Context(), tk, chi.URLParam(r, "id"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	acct, err := s.store.Account(r.Context(), c.Account)
	if err != nil {
		writeError(w, r, err)
		return
	}
	s.execStream(w, s.authenticated(r, acct, c.TokenID, c.tokenExpires()))
}

// originAllowed admits requests without an Origin (not a browser), the
// address the connection came in on (sbx dev's page on the API itself),
// and the configured patterns (host[:port] globs: the API's public names).
// The request's Host is not the API's origin: whoever sends the request
// chooses it, so Host: evil.example with Origin: http://evil.example
// would pass any comparison of the two.
func (s *Server) originAllowed(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	if err != nil || u.Host == "" {
		return false
	}
	if local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && sameAddr(u, local) {
		return true
	}
	for _, p := range s.cfg.StreamOrigins {
		if ok, _ := path.Match(strings.ToLower(p), strings.ToLower(u.Host)); ok {
			return true
		}
	}
	return false
}

// sameAddr reports whether origin u names the listener address local:
// its port, and its IP, or "localhost" for a loopback listener.
func sameAddr(u *url.URL, local net.Addr) bool {
	tcp, ok := local.(*net.TCPAddr)
	if !ok || u.Port() != strconv.Itoa(tcp.Port) {
		return false
	}
	host := u.Hostname()
	if tcp.IP.IsLoopback() && strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.Equal(tcp.IP)
}

func (s *Server) execStream(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	size := func(name string, def int) (int, bool) {
		v := q.Get(name)
		if v == "" {
			return def, true
		}
		n, err := strconv.Atoi(v)
		return n, err == nil && n >= 1 && n <= 1000
	}
	cols, okc := size("cols", 80)
	rows, okr := size("rows", 24)
	if !okc || !okr {
		name := "cols"
		if okc {
			name = "rows"
		}
		writeProblem(w, r, badQuery(name, "must be an integer from 1 to 1000"))
		return
	}
	req := podssh.TerminalRequest{Command: q.Get("command"), Term: q.Get("term"), Cols: cols, Rows: rows}
	if strings.ContainsRune(req.Command, 0) {
		writeProblem(w, r, badQuery("command", "must not contain NUL"))
		return
	}
	epoch := s.streams.Epoch() // before the sandbox is checked
	t, err := s.target(r)      // wakes a suspended sandbox; the stream counts as activity
	if err != nil {
		writeError(w, r, err)
		return
	}
	if req.Dir, err = lifecycle.ExecDir(t.Workspace, q.Get("cwd")); err != nil {
		writeError(w, r, err)
		return
	}
	// ctx is the session's life: it ends when the client goes, control
	// shuts down, or the stream's authority goes (streamauth.go).
	ctx, cancel, sw, ok := s.watchStream(w, r, t.SandboxID, inSandbox, epoch)
	if !ok {
		return
	}
	defer sw.done()
	rec := s.recordStream(r, connlog.KindTerminal, t.SandboxID)
	defer func() { rec.Close(endReason(ctx)) }()
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		// Checked by originAllowed, with the API's patterns.
		InsecureSkipVerify: true,
	})
	if err != nil {
		return // Accept answered
	}
	defer conn.CloseNow()
	// ioCtx bounds reads and writes of the socket. It outlives ctx until
	// the handler returns: a canceled read context makes the websocket
	// library drop the connection at once, and the closing message and
	// close frame that say why the session ended must go out first.
	ioCtx, stopIO := context.WithCancel(r.Context())
	sw.endOnShutdown()

	term, err := s.pods.Terminal(ctx, t, req)
	if err != nil {
		stopIO()
		p := toProblem(r, err)
		s.writePty(ctx, conn, ptyMessage{Type: "error", Problem: p})
		_ = conn.Close(websocket.StatusInternalError, p.Code)
		return
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer term.Close()
	defer stopIO()
	wg.Add(3)
	go func() {
		defer wg.Done()
		if err := pingLoop(ioCtx, conn, keepAlive); err != nil {
			cancel(err)
		}
	}()
	go func() {
		defer wg.Done()
		cancel(s.ptyInput(ioCtx, conn, term, rec))
	}()
	outDone := make(chan struct{})
	go func() {
		defer wg.Done()
		defer close(outDone)
		buf := make([]byte, 32<<10)
		for {
			n, err := term.Stdout().Read(buf)
			rec.AddOut(int64(n))
			if n > 0 {
				if werr := conn.Write(ioCtx, websocket.MessageBinary, buf[:n]); werr != nil {
					cancel(fmt.Errorf("write to client: %w", werr))
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	res, err := term.Wait(ctx)
	if err != nil {
		clientLeft := ctx.Err() != nil // before failed, which may end ctx
		gone, ended := sw.failed(ctx)
		switch {
		case ended:
			_ = term.Close() // hang the command up before telling the client
			s.writePty(ioCtx, conn, ptyMessage{Type: "error", Problem: gone.p})
			_ = conn.Close(websocket.StatusPolicyViolation, gone.p.Code)
		case errors.Is(context.Cause(ctx), errShuttingDown):
			_ = conn.Close(websocket.StatusGoingAway, "control is shutting down")
		case !clientLeft:
			// The session broke with the client still there: say so
			// rather than drop the connection without a reason.
			p := toProblem(r, err)
			s.writePty(ioCtx, conn, ptyMessage{Type: "error", Problem: p})
			_ = conn.Close(websocket.StatusInternalError, p.Code)
		}
		return // else the client went away: term.Close hangs the command up
	}
	// The output ends once the session closed; wait briefly for its tail.
	select {
	case <-outDone:
	case <-time.After(2 * time.Second):
	}
	code := res.ExitCode
	s.writePty(ioCtx, conn, ptyMessage{Type: "exit", ExitCode: &code, Signal: optional(res.Signal)})
	_ = conn.Close(websocket.StatusNormalClosure, "exited")
	cancel(nil)
}

// pingLoop pings the client every interval so proxies with idle timeouts
// keep a quiet terminal open, and notices a client that vanished without
// closing. It returns nil when ctx ends.
func pingLoop(ctx context.Context, conn *websocket.Conn, interval time.Duration) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			pctx, cancel := context.WithTimeout(ctx, interval)
			err := conn.Ping(pctx)
			cancel()
			if err != nil && ctx.Err() == nil {
				return fmt.Errorf("ping client: %w", err)
			}
		}
	}
}

func (s *Server) writePty(ctx context.Context, conn *websocket.Conn, m ptyMessage) {
	b, _ := json.Marshal(m)
	_ = conn.Write(ctx, websocket.MessageText, b)
}

// ptyInput feeds the client's frames to the terminal until the client
// goes away (the error says how).
func (s *Server) ptyInput(ctx context.Context, conn *websocket.Conn, term *podssh.Terminal, rec *connlog.Conn) error {
	for {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			return fmt.Errorf("read from client: %w", err)
		}
		if typ == websocket.MessageBinary {
			rec.AddIn(int64(len(data)))
			if _, err := term.Stdin().Write(data); err != nil {
				return fmt.Errorf("write to terminal: %w", err)
			}
			continue
		}
		var m ptyMessage
		if err := jsonbody.Decode(data, &m, jsonbody.Options{AllowUnknownFields: true}); err != nil {
			return fmt.Errorf("client message: %w", err)
		}
		switch m.Type {
		case "stdin":
			rec.AddIn(int64(len(m.Data)))
			_, err = term.Stdin().Write([]byte(m.Data))
		case "resize":
			if m.Cols >= 1 && m.Cols <= 1000 && m.Rows >= 1 && m.Rows <= 1000 {
				err = term.Resize(m.Cols, m.Rows)
			}
		case "signal":
			if m.Signal != nil {
				err = term.Signal(strings.TrimPrefix(strings.ToUpper(*m.Signal), "SIG"))
			}
		}
		if err != nil {
			return fmt.Errorf("%s: %w", m.Type, err)
		}
	}
}
