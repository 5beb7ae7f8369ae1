package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

// eventView is the JSON form of a lifecycle event.
type eventView struct {
	ID       int64           `json:"id"`
	Type     string          `json:"type"`
	State    *store.State    `json:"state"`
	Reason   *string         `json:"reason"`
	Actor    *string         `json:"actor"`
	Message  *string         `json:"message"`
	At       time.Time       `json:"at"`
	Consumer *store.Consumer `json:"consumer"`
}

func viewEvent(e store.Event) eventView {
	v := eventView{ID: e.ID, Type: e.Type, Reason: optional(e.Reason), Actor: optional(e.Actor),
		Message: optional(e.Message), At: e.At.UTC()}
	if e.State != "" {
		st := e.State
		v.State = &st
	}
	if !e.Consumer.IsZero() {
		c := e.Consumer
		v.Consumer = &c
	}
	return v
}

type eventListView struct {
	Events []eventView `json:"events"`
}

// keepAlive is how often an idle stream sends a comment, so proxies and
// load balancers with idle timeouts (commonly 60 s) keep it open.
const keepAlive = 15 * time.Second

// StopStreams ends every open event stream and every command an MCP call
// left running (they are long-lived and would
// otherwise hold http.Server.Shutdown until its deadline). Call it from
// the server's RegisterOnShutdown. Later calls do nothing.
func (s *Server) StopStreams() {
	s.stopStreamsOnce.Do(func() {
		close(s.stopStreams)
		s.streams.Close()  // every stream is ending now; no expiry timer is left behind
		s.mcpExecs.Close() // commands MCP calls left running hold their exec streams
	})
}

// events lists a sandbox's lifecycle events, or streams them as
// server-sent events when the client accepts text/event-stream. A stream
// resumes after Last-Event-ID (or ?after=) and ends once the sandbox has
// reached a final state and that event was sent, or, with a last "error"
// event carrying token_revoked or token_expired, when its token is
// revoked or expires.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	epoch := s.streams.Epoch() // before the sandbox is checked
	sb, ok := s.urlSandbox(w, r)
	if !ok {
		return
	}
	after := int64(0)
	for _, v := range []struct{ name, val string }{{"after", r.URL.Query().Get("after")}, {"Last-Event-ID", r.Header.Get("Last-Event-ID")}} {
		if v.val == "" {
			continue
		}
		n, err := strconv.ParseInt(v.val, 10, 64)
		if err != nil || n < 0 {
			writeProblem(w, r, badQuery(v.name, "must be a non-negative event id"))
			return
		}
		after = n
	}
	if !strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		evs, err := s.store.Events(r.Context(), sb.ID, after)
		if err != nil {
			writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, eventListView{Events: views(evs, viewEvent)})
		return
	}
	s.streamEvents(w, r, sb.ID, after, epoch)
}

// streamEvents rides on its token only (see tokenOnly): the sandbox's
// suspend and end are what it reports.
func (s *Server) streamEvents(w http.ResponseWriter, r *http.Request, sandboxID string, after int64, epoch uint64) {
	ctx, _, sw, ok := s.watchStream(w, r, sandboxID, tokenOnly, epoch)
	if !ok {
		return
	}
	defer sw.done()
	// Subscribe before the first read: an event committed between the
	// read and the wait then still signals, and the next read finds it.
	changed, cancel := s.store.SubscribeEvents(sandboxID)
	defer cancel()

	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return
	}
	defer func() {
		// A read cut short by the revocation ends the loop too.
		if se, ended := endedBy(ctx); ended {
			data, _ := json.Marshal(se.p)
			if _, err := fmt.Fprintf(w, "event: error\ndata: %s\n\n", data); err == nil {
				_ = rc.Flush()
			}
		}
	}()
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		// The state is read before the events: the final state's event
		// commits with the state, so once a final state is seen the read
		// that follows holds its event.
		sb, err := s.store.Sandbox(ctx, sandboxID)
		if err != nil {
			if ctx.Err() == nil {
				logger(r).WarnContext(ctx, "event stream: read sandbox", "sandbox_id", sandboxID, "err", err)
			}
			return
		}
		evs, err := s.store.Events(ctx, sandboxID, after)
		if err != nil {
			if ctx.Err() == nil {
				logger(r).WarnContext(ctx, "event stream: read events", "sandbox_id", sandboxID, "err", err)
			}
			return
		}
		for _, e := range evs {
			data, _ := json.Marshal(viewEvent(e))
			if _, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", e.ID, e.Type, data); err != nil {
				return
			}
			after = e.ID
		}
		if len(evs) > 0 {
			if err := rc.Flush(); err != nil {
				return
			}
		}
		if sb.State.Final() {
			return
		}
		select {
		case <-changed:
		case <-tick.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
		case <-ctx.Done():
			return
		case <-s.stopStreams:
			return
		}
	}
}
