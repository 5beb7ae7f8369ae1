package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/coder/websocket"
)

// The latencies sbx scaletest measures, in the order its table shows them.
const (
	kindReady     = "sandbox create→ready"
	kindSSHConn   = "ssh connect"
	kindSSHFirst  = "ssh first byte"
	kindSSHEcho   = "ssh keystroke echo"
	kindPrevConn  = "preview connect"
	kindPrevFirst = "preview first byte"
	kindPrevReq   = "preview request"
	kindWSConn    = "websocket connect"
	kindWSEcho    = "websocket echo"
	kindTermConn  = "terminal connect"
	kindTermFirst = "terminal first byte"
	kindTermEcho  = "terminal echo"
)

var scaleKinds = []string{kindReady, kindSSHConn, kindSSHFirst, kindSSHEcho, kindPrevConn, kindPrevFirst, kindPrevReq,
	kindWSConn, kindWSEcho, kindTermConn, kindTermFirst, kindTermEcho}

// plottedKinds are the steady traffic's latencies, drawn over time.
var plottedKinds = []string{kindSSHEcho, kindPrevReq, kindWSEcho, kindTermEcho}

// scaleRecorder keeps every sample by kind and by second since start
// (the plot's buckets), and the errors by kind. Safe for concurrent use.
type scaleRecorder struct {
	start time.Time
	mu    sync.Mutex
	// samples[kind][second] are the durations measured in that second.
	samples map[string][][]time.Duration
	errs    map[string]int
	example map[string]string // the first message of each error kind
}

func newScaleRecorder(start time.Time) *scaleRecorder {
	return &scaleRecorder{start: start, samples: map[string][][]time.Duration{}, errs: map[string]int{}, example: map[string]string{}}
}

func (r *scaleRecorder) add(kind string, d time.Duration) {
	sec := max(int(time.Since(r.start)/time.Second), 0)
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.samples[kind]
	for len(s) <= sec {
		s = append(s, nil)
	}
	s[sec] = append(s[sec], d)
	r.samples[kind] = s
}

// fail counts an error of what (a kind) by its class.
func (r *scaleRecorder) fail(what string, err error) {
	key := what + ": " + errClass(err)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.errs[key] == 0 {
		r.example[key] = err.Error()
	}
	r.errs[key]++
}

// errClass names an error's kind for the errors table: what an operator
// would look for first (timeouts, refusals, resets, the API's codes, an
// HTTP status), not the message.
func errClass(err error) string {
	var pe *apiError
	var se *httpStatusError
	var ce websocket.CloseError
	var ne net.Error
	switch {
	case errors.As(err, &pe):
		return "api " + pe.Code
	case errors.As(err, &se):
		return fmt.Sprintf("http %d", se.code)
	case errors.Is(err, errEchoTimeout), errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "reset"
	case errors.As(err, &ce):
		return "websocket closed " + ce.Code.String()
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return "closed"
	}
	return "other"
}

// httpStatusError is a preview answering other than 200.
type httpStatusError struct{ code int }

func (e *httpStatusError) Error() string { return fmt.Sprintf("preview answered HTTP %d", e.code) }

// errEchoTimeout is a keystroke whose echo did not come back in time.
var errEchoTimeout = errors.New("no echo within the timeout")

// latencyRow is one line of the table and of -o json.
type latencyRow struct {
	Name    string  `json:"name"`
	Samples int     `json:"samples"`
	Errors  int     `json:"errors"`
	P50ms   float64 `json:"p50_ms"`
	P95ms   float64 `json:"p95_ms"`
	P99ms   float64 `json:"p99_ms"`
	MaxMs   float64 `json:"max_ms"`
}

// quantile is the nearest-rank q-quantile of sorted, in milliseconds.
func quantile(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := max(int(math.Ceil(q*float64(len(sorted))))-1, 0)
	return ms(sorted[min(i, len(sorted)-1)])
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

// rows summarizes each kind that was measured or failed.
func (r *scaleRecorder) rows() []latencyRow {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []latencyRow
	for _, kind := range scaleKinds {
		var all []time.Duration
		for _, s := range r.samples[kind] {
			all = append(all, s...)
		}
		errs := 0
		for k, n := range r.errs {
			if len(k) > len(kind) && k[:len(kind)+1] == kind+":" {
				errs += n
			}
		}
		if len(all) == 0 && errs == 0 {
			continue
		}
		slices.Sort(all)
		row := latencyRow{Name: kind, Samples: len(all), Errors: errs}
		if len(all) > 0 {
			row.P50ms, row.P95ms, row.P99ms, row.MaxMs = quantile(all, 0.50), quantile(all, 0.95), quantile(all, 0.99), ms(all[len(all)-1])
		}
		out = append(out, row)
	}
	return out
}

// errorRow is one kind of error with how often it happened.
type errorRow struct {
	Kind    string `json:"kind"`
	Count   int    `json:"count"`
	Example string `json:"example"`
}

func (r *scaleRecorder) errorRows() []errorRow {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []errorRow{}
	for k, n := range r.errs {
		out = append(out, errorRow{Kind: k, Count: n, Example: r.example[k]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Kind < out[j].Kind })
	return out
}

// secondPoint is one second of one kind: its p50 and p99.
type secondPoint struct {
	Second  int     `json:"second"`
	P50ms   float64 `json:"p50_ms"`
	P99ms   float64 `json:"p99_ms"`
	Samples int     `json:"samples"`
}

// series is the per-second p50 and p99 of kind, seconds without samples
// left out.
func (r *scaleRecorder) series(kind string) []secondPoint {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []secondPoint
	for sec, s := range r.samples[kind] {
		if len(s) == 0 {
			continue
		}
		s = slices.Clone(s)
		slices.Sort(s)
		out = append(out, secondPoint{Second: sec, P50ms: quantile(s, 0.50), P99ms: quantile(s, 0.99), Samples: len(s)})
	}
	return out
}
