// Package httplimit puts a deadline on request bodies that holds before
// authentication (see BodyDeadline); internal/netlimit bounds the
// listeners underneath.
package httplimit

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"
)

// Body deadline defaults, for servers whose configuration names none.
const (
	// DefaultBodyTimeout is how long a request body may take to start,
	// and how long it may stall later: a client that declared a body
	// and sends none is cut after it.
	DefaultBodyTimeout = 20 * time.Second
	// DefaultBodyMinRate, in bytes a second, is the slowest a body may
	// arrive on average before its sender has authenticated: each byte
	// received moves the deadline on by 1/MinRate s, so an upload at a
	// usable speed never meets it while a trickle (a byte every few
	// seconds) does. 1 KiB/s is 8 kbit/s.
	DefaultBodyMinRate = 1 << 10
)

// BodyDeadline bounds how long a request body may take, through the
// connection's read deadline (http.ResponseController), which net/http
// leaves unset after the headers when Server.ReadTimeout is zero: a
// global ReadTimeout would also cut WebSockets, event streams and large
// uploads, which must last as long as they move.
//
// A request with a body gets a deadline timeout after it starts; each
// read moves it to the earlier of start + timeout + received/minRate and
// the last progress + timeout. Once the handler calls Trust (it
// authenticated the sender), only the second holds: the body may take as
// long as it keeps moving. At the end of the body the deadline is lifted,
// so a response that streams on is not cut.
//
// A handler that returns without reading the body to its end gets its
// connection closed after the response, rather than net/http reading up
// to 256 KiB of an unwanted body (that may never come) before answering:
// a 401 goes out at once.
type BodyDeadline struct {
	Timeout time.Duration // 0: DefaultBodyTimeout
	MinRate int64         // bytes a second; 0: DefaultBodyMinRate
}

// Wrap returns h with the deadline on its request bodies.
func (d BodyDeadline) Wrap(h http.Handler) http.Handler {
	if d.Timeout <= 0 {
		d.Timeout = DefaultBodyTimeout
	}
	if d.MinRate <= 0 {
		d.MinRate = DefaultBodyMinRate
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			h.ServeHTTP(w, r)
			return
		}
		b := &deadlineBody{rc: r.Body, ctl: http.NewResponseController(w), d: d, start: time.Now(), length: r.ContentLength, http1: r.ProtoMajor == 1}
		if b.set(b.start.Add(d.Timeout)) != nil {
			// The writer cannot take a deadline (a test recorder): serve
			// as is.
			h.ServeHTTP(w, r)
			return
		}
		r2 := new(http.Request)
		*r2 = *r // net/http's own request keeps its body, which it drains
		r2.Body = b
		r2 = r2.WithContext(context.WithValue(r.Context(), bodyKey{}, b))
		if r.ProtoMajor == 1 {
			w = &closeUnread{ResponseWriter: w, b: b}
		}
		h.ServeHTTP(w, r2)
		if !b.finished() {
			// net/http closes the body after the handler, reading up
			// to 256 KiB of it first; the connection closes anyway.
			_ = b.set(aLongTimeAgo)
		}
	})
}

// closeUnread answers with Connection: close when the handler starts its
// answer with the body not read to its end: net/http would read up to
// 256 KiB of the rest first, before sending a byte of the answer, to keep
// the connection. Only requests with a body have it; a WebSocket upgrade
// has none, so no Hijacker is lost.
type closeUnread struct {
	http.ResponseWriter
	b     *deadlineBody
	wrote bool
}

func (w *closeUnread) WriteHeader(code int) {
	if !w.wrote {
		w.wrote = true
		if !w.b.finished() {
			w.Header().Set("Connection", "close")
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *closeUnread) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

// Flush keeps streamed answers (an event stream to a POST) streaming.
func (w *closeUnread) Flush() {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection.
func (w *closeUnread) Unwrap() http.ResponseWriter { return w.ResponseWriter }

type bodyKey struct{}

// aLongTimeAgo is a deadline in the past, ending any read at once.
var aLongTimeAgo = time.Unix(1, 0)

// Trust tells the deadline on r's body that its sender authenticated:
// from now on it holds only against a body that stops moving. Without a
// BodyDeadline around the handler it does nothing.
func Trust(r *http.Request) {
	if b, ok := r.Context().Value(bodyKey{}).(*deadlineBody); ok {
		b.trust()
	}
}

type deadlineBody struct {
	rc    io.ReadCloser
	ctl   *http.ResponseController
	d     BodyDeadline
	start time.Time
	// length is the declared length, -1 when unknown (chunked): a body
	// read to its declared length is done even before a read sees EOF.
	length int64
	// http1: net/http's HTTP/1 server lifts the deadline itself when the
	// body meets EOF, as it starts its background read (see Read).
	http1 bool

	mu       sync.Mutex // guards below
	received int64
	trusted  bool
	eof      bool
	// reading: a Read is in rc.Read; movedInRead: trust set a deadline
	// meanwhile, perhaps after that read's EOF lifted net/http's.
	reading, movedInRead bool
}

func (b *deadlineBody) set(t time.Time) error {
	err := b.ctl.SetReadDeadline(t)
	if errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	b.reading, b.movedInRead = true, false
	b.mu.Unlock()
	n, err := b.rc.Read(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reading = false
	b.received += int64(n)
	switch {
	case err == io.EOF || b.received == b.length:
		b.eof = true
		// On HTTP/1 the EOF started net/http's background read, with
		// the deadline lifted under its own lock. Lifting it again here,
		// unlocked, can undo the deadline in the past with which a
		// Hijack (a WebSocket's 101) stops that read: the Hijack then
		// waits until the client sends a byte, which a client awaiting
		// its 101 never does.
		// (Unless trust moved it during this read: left alone, its
		// deadline would end the background read, and the request,
		// after Timeout.)
		if err != io.EOF || !b.http1 || b.movedInRead {
			_ = b.set(time.Time{})
		}
	case n > 0:
		_ = b.set(b.deadlineLocked(time.Now()))
	}
	return n, err
}

func (b *deadlineBody) deadlineLocked(now time.Time) time.Time {
	idle := now.Add(b.d.Timeout)
	if b.trusted {
		return idle
	}
	rate := b.start.Add(b.d.Timeout + time.Duration(b.received)*time.Second/time.Duration(b.d.MinRate))
	if rate.Before(idle) {
		return rate
	}
	return idle
}

func (b *deadlineBody) trust() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.trusted = true
	if !b.eof {
		_ = b.set(b.deadlineLocked(time.Now()))
		b.movedInRead = b.reading
	}
}

func (b *deadlineBody) finished() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.eof
}

func (b *deadlineBody) Close() error { return b.rc.Close() }
