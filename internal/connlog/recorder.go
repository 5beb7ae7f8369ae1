package connlog

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Batch is what a reporter sends: the records that changed since its last
// batch (opened, closed, new bytes or channels, a client kind learned) and,
// by being sent at all, the renewal of the lease on every connection it
// still holds open. A reporter that stops sending batches loses its live
// connections after Lease: control ends them with EndEdgeLost.
type Batch struct {
	// Reporter names the process (an edge replica, a control replica) for
	// the life of the process.
	Reporter string `json:"reporter"`
	// LeaseSeconds is how long the reporter's live connections stay live
	// without another batch.
	LeaseSeconds float64  `json:"lease_seconds"`
	Records      []Record `json:"records"`
}

// Lease returns the batch's lease as a duration.
func (b Batch) Lease() time.Duration { return time.Duration(b.LeaseSeconds * float64(time.Second)) }

// Sink receives batches: control's internal API client on the edge, the
// store itself in control.
type Sink interface {
	ReportConnections(ctx context.Context, b Batch) error
}

// RecorderConfig configures a Recorder.
type RecorderConfig struct {
	// Reporter names this process; default a random "r_…".
	Reporter string
	Sink     Sink
	// Every is the batch interval; default 1s. A batch is sent every
	// interval even when nothing changed: it renews the lease.
	Every time.Duration
	// Lease is how long control keeps this reporter's connections live
	// without a batch; default 30s, well inside the minute the log
	// promises, and many intervals long so one slow call loses nothing.
	Lease time.Duration
	// MaxBatch bounds the records in one call; more are sent in several.
	// Default 64, which keeps a call well inside the internal API's 64 KiB
	// body limit.
	MaxBatch int
	// Source labels this recorder's gauge ("edge", "control"), so two
	// recorders can share a registry (sbx dev).
	Source   string
	Registry prometheus.Registerer
	Logger   *slog.Logger
}

// maxPending bounds the ended records kept while the sink fails; past it
// the oldest are dropped (control's lease then ends them as edge_lost).
const maxPending = 10000

// Recorder tracks this process's live connections and reports them in
// batches. Run owns the batching goroutine.
type Recorder struct {
	cfg  RecorderConfig
	log  *slog.Logger
	live *prometheus.GaugeVec

	mu      sync.Mutex
	conns   map[string]*Conn
	pending []Record // ended, not yet reported
}

// NewRecorder validates nothing that can fail: every field has a default.
func NewRecorder(cfg RecorderConfig) (*Recorder, error) {
	if cfg.Reporter == "" {
		cfg.Reporter = "r_" + NewID()[2:]
	}
	if cfg.Every <= 0 {
		cfg.Every = time.Second
	}
	if cfg.Lease <= 0 {
		cfg.Lease = 30 * time.Second
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 64
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Recorder{cfg: cfg, log: cfg.Logger, conns: make(map[string]*Conn)}
	r.live = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name:        "sbx_connections_live",
		Help:        "Connections open now, by kind (ssh, preview, terminal, exec, mcp), as this process's connection log sees them.",
		ConstLabels: prometheus.Labels{"source": cfg.Source},
	}, []string{"kind"})
	for _, k := range Kinds {
		r.live.WithLabelValues(string(k))
	}
	if cfg.Registry != nil {
		if err := cfg.Registry.Register(r.live); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Reporter is the name this recorder reports under.
func (r *Recorder) Reporter() string { return r.cfg.Reporter }

// NewID returns a fresh connection ID.
func NewID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "c_" + hex.EncodeToString(b[:])
}

// Open starts recording rec (ID and StartedAt are filled in when empty).
// The caller must Close the returned Conn.
//
// A nil Recorder records nothing and returns a nil Conn, whose methods do
// nothing: a surface built without a log needs no checks.
func (r *Recorder) Open(rec Record) *Conn {
	if r == nil {
		return nil
	}
	if rec.ID == "" {
		rec.ID = NewID()
	}
	if rec.StartedAt.IsZero() {
		rec.StartedAt = time.Now().UTC()
	}
	if rec.ClientKind == "" {
		rec.ClientKind = ClientUnknown
	}
	rec.ClientDetail = Cut(rec.ClientDetail, MaxDetail)
	c := &Conn{r: r, rec: rec, dirty: true}
	r.mu.Lock()
	r.conns[rec.ID] = c
	r.mu.Unlock()
	r.live.WithLabelValues(string(rec.Kind)).Inc()
	return c
}

// Run sends a batch every interval until ctx ends, then ends every
// connection still open with EndShutdown and sends a last batch (bounded
// by a few seconds), so a clean stop leaves nothing for the lease.
func (r *Recorder) Run(ctx context.Context) {
	t := time.NewTicker(r.cfg.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			r.mu.Lock()
			open := make([]*Conn, 0, len(r.conns))
			for _, c := range r.conns {
				open = append(open, c)
			}
			r.mu.Unlock()
			for _, c := range open {
				c.Close(EndShutdown)
			}
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			r.Flush(fctx)
			cancel()
			return
		case <-t.C:
			r.Flush(ctx)
		}
	}
}

// Flush sends what changed since the last batch (at least one call, which
// renews the lease). What fails to send is sent with the next batch.
func (r *Recorder) Flush(ctx context.Context) {
	r.mu.Lock()
	recs := r.pending
	r.pending = nil
	var sent []*Conn
	for _, c := range r.conns {
		if rec, ok := c.snapshot(); ok {
			recs = append(recs, rec)
			sent = append(sent, c)
		}
	}
	r.mu.Unlock()
	var err error
	for i := 0; i == 0 || i < len(recs); i += r.cfg.MaxBatch {
		part := recs[i:min(i+r.cfg.MaxBatch, len(recs))]
		err = r.cfg.Sink.ReportConnections(ctx, Batch{Reporter: r.cfg.Reporter, LeaseSeconds: r.cfg.Lease.Seconds(), Records: part})
		if err != nil {
			break
		}
	}
	if err == nil {
		return
	}
	if !errors.Is(err, context.Canceled) {
		r.log.WarnContext(ctx, "report connections", "records", len(recs), "err", err)
	}
	// Resend: ended records go back to pending, live ones are marked
	// dirty again so their latest state goes next time.
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range recs {
		if rec.EndedAt != nil {
			r.pending = append(r.pending, rec)
		}
	}
	if n := len(r.pending) - maxPending; n > 0 {
		r.pending = r.pending[n:]
	}
	for _, c := range sent {
		c.mu.Lock()
		c.dirty = true
		c.mu.Unlock()
	}
}

// Live returns the records of the connections open now.
func (r *Recorder) Live() []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Record, 0, len(r.conns))
	for _, c := range r.conns {
		c.mu.Lock()
		out = append(out, c.record())
		c.mu.Unlock()
	}
	return out
}

// Conn is one recorded connection. Its methods are safe for concurrent
// use; the byte counters are cheap enough for every read and write.
type Conn struct {
	r       *Recorder
	in, out atomic.Int64
	mu      sync.Mutex
	rec     Record
	dirty   bool
	sentIn  int64
	sentOut int64
	closed  bool
}

// ID is the connection's ID.
func (c *Conn) ID() string {
	if c == nil {
		return ""
	}
	return c.rec.ID
}

// AddIn counts bytes from the client to the sandbox.
func (c *Conn) AddIn(n int64) {
	if c != nil {
		c.in.Add(n)
	}
}

// AddOut counts bytes from the sandbox to the client.
func (c *Conn) AddOut(n int64) {
	if c != nil {
		c.out.Add(n)
	}
}

// SetClient records the client's kind once learned (an SSH env request
// comes after the connection opened).
func (c *Conn) SetClient(kind, detail string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if kind != c.rec.ClientKind || (detail != "" && detail != c.rec.ClientDetail) {
		c.rec.ClientKind = kind
		if detail != "" {
			c.rec.ClientDetail = Cut(detail, MaxDetail)
		}
		c.dirty = true
	}
}

// ClientKind is the kind recorded so far.
func (c *Conn) ClientKind() string {
	if c == nil {
		return ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rec.ClientKind
}

// AddChannel records that the connection carried a channel of kind.
func (c *Conn) AddChannel(kind string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.rec.Channels)
	c.rec.Channels = AddChannel(c.rec.Channels, kind)
	c.dirty = c.dirty || len(c.rec.Channels) != n
}

// Close ends the connection with reason; later calls do nothing.
func (c *Conn) Close(reason string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	now := time.Now().UTC()
	c.rec.EndedAt = &now
	c.rec.EndReason = reason
	rec := c.record()
	c.mu.Unlock()
	r := c.r
	r.mu.Lock()
	delete(r.conns, c.rec.ID)
	r.pending = append(r.pending, rec)
	r.mu.Unlock()
	r.live.WithLabelValues(string(c.rec.Kind)).Dec()
}

// record is the current record; c.mu held.
func (c *Conn) record() Record {
	rec := c.rec
	rec.Channels = append([]string(nil), c.rec.Channels...)
	rec.BytesIn, rec.BytesOut = c.in.Load(), c.out.Load()
	return rec
}

// snapshot returns the record if it changed since the last batch; r.mu
// held.
func (c *Conn) snapshot() (Record, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rec := c.record()
	if !c.dirty && rec.BytesIn == c.sentIn && rec.BytesOut == c.sentOut {
		return Record{}, false
	}
	c.dirty = false
	c.sentIn, c.sentOut = rec.BytesIn, rec.BytesOut
	return rec, true
}
