// Package redisstore is the production activity store: every edge and
// control replica shares activity through Redis.
//
// Keys, under Config.Prefix:
//
//	seen   sorted set: member sandbox ID, score last mark (Unix ms). Written
//	       with ZADD GT, so a replica flushing an older mark never moves a
//	       sandbox's last-seen back.
//	live   sorted set: member "<sandbox ID>|<instance>", score heartbeat
//	       expiry (Unix ms). One member per process per sandbox with open
//	       connections, refreshed every HeartbeatTTL/3; a crashed process's
//	       members lapse after HeartbeatTTL.
//	epoch  string "<random>.<start, Unix ms>": the record the keys above
//	       belong to (see activity.Status.Epoch). Whoever finds it
//	       missing (Redis restarted empty or flushed) writes a new one.
//	flushes:<instance>
//	       counter: one process's flushes, expiring RetryFor+HeartbeatTTL
//	       after its last flush. A process that sees its own counter go
//	       back (a failover to a replica that missed its last flushes; the
//	       key lapsed while Redis was out of reach) writes a new epoch, as
//	       it does after dropping marks.
//	wake   pub/sub channel: payload sandbox ID, published on state changes.
//
// One flush is one pipelined round trip of at most five commands whatever
// the number of sandboxes, so Redis load grows with the flush rate, not
// with requests or bytes. A flush runs every interval even with nothing to
// write, so a loss is noticed within one interval.
package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sbxedge/sbx/activity"
	"github.com/sbxedge/sbx/internal/outage"
	"github.com/sbxedge/sbx/internal/tick"
)

var _ activity.Store = (*Store)(nil)

// Config configures a Store. Zero values take the defaults in New.
type Config struct {
	// Client is the Redis connection; required. The Store does not close it.
	Client *redis.Client
	// Prefix starts every key and the channel name (default "sbx:activity:").
	Prefix string
	// FlushInterval is how often marks and due heartbeats are written
	// (default 1 s).
	FlushInterval time.Duration
	// HeartbeatTTL is how long an open connection counts as live after its
	// last heartbeat (default 30 s): the longest a crashed process can pin
	// a sandbox awake.
	HeartbeatTTL time.Duration
	// RetryFor is how long a mark that could not be written is retried
	// before it is dropped and counted (default 30 s).
	RetryFor time.Duration
	// SeenTTL trims last-seen records older than this (default 8 days,
	// past the 7-day sandbox lifetime cap).
	SeenTTL time.Duration
	// Instance names this process in heartbeats (default random).
	Instance string
	// Registry receives the store's metrics (nil: not registered).
	Registry prometheus.Registerer
	Logger   *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Validate reports the first bad field.
func (c Config) Validate() error {
	switch {
	case c.Client == nil:
		return errors.New("redisstore: Client is required")
	case c.FlushInterval < 0, c.HeartbeatTTL < 0, c.RetryFor < 0, c.SeenTTL < 0:
		return errors.New("redisstore: durations must not be negative")
	case strings.Contains(c.Instance, "|"):
		return errors.New("redisstore: Instance must not contain '|'")
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.Prefix == "" {
		c.Prefix = "sbx:activity:"
	}
	if c.FlushInterval == 0 {
		c.FlushInterval = time.Second
	}
	if c.HeartbeatTTL == 0 {
		c.HeartbeatTTL = 30 * time.Second
	}
	if c.RetryFor == 0 {
		c.RetryFor = 30 * time.Second
	}
	if c.SeenTTL == 0 {
		c.SeenTTL = 8 * 24 * time.Hour
	}
	if c.Instance == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		c.Instance = hex.EncodeToString(b[:])
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// mark is one sandbox's unflushed activity.
type mark struct {
	at    int64     // latest mark, Unix ms
	since time.Time // when it was first held unflushed, for RetryFor
}

// Store implements activity.Store on Redis. New starts a flush loop and a
// subscription loop; Close (or Halt) stops both and waits for them.
type Store struct {
	cfg    Config
	rdb    *redis.Client
	fanout activity.Fanout

	mu       sync.Mutex // guards the fields below
	pending  map[string]mark
	open     map[string]int      // open connections per sandbox
	fresh    map[string]struct{} // opened since the last heartbeat round
	released map[string]struct{} // count fell to zero; member to remove
	lastBeat time.Time
	closed   bool

	lost bool // marks were dropped: start a new epoch at the next flush

	flushMu sync.Mutex // serialises flushes so retries merge in order
	// epoch and flushSeq are what the last successful flush read back;
	// flushMu guards them.
	epoch    string
	flushSeq int64

	flushed, dropped, flushErrors atomic.Uint64
	flushLog                      *outage.Log

	cancel context.CancelFunc
	wg     sync.WaitGroup
	pubsub *redis.PubSub
}

// New starts a store.
func New(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	s := &Store{
		cfg: cfg, rdb: cfg.Client,
		pending: map[string]mark{}, open: map[string]int{},
		fresh: map[string]struct{}{}, released: map[string]struct{}{},
		flushLog: outage.New(cfg.Logger, "activity flush", cfg.Now),
	}
	if cfg.Registry != nil {
		if err := s.register(cfg.Registry); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	// Subscribing does not wait for Redis: go-redis reconnects the
	// subscription in the background, and local subscribers are told
	// directly by Publish meanwhile.
	s.pubsub = s.rdb.Subscribe(ctx, cfg.Prefix+"wake")
	s.wg.Add(2)
	go s.flushLoop(ctx)
	go s.subscribeLoop()
	return s, nil
}

func (s *Store) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sbx_activity_marks_flushed_total", Help: "Coalesced per-sandbox marks written to Redis.",
		}, func() float64 { return float64(s.flushed.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sbx_activity_marks_dropped_total", Help: "Marks dropped after Redis stayed unreachable past the retry window.",
		}, func() float64 { return float64(s.dropped.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sbx_activity_flush_errors_total", Help: "Flushes to Redis that failed.",
		}, func() float64 { return float64(s.flushErrors.Load()) }),
	} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("redisstore: register metrics: %w", err)
		}
	}
	return nil
}

// Stats are the store's counters, as exported to Prometheus.
type Stats struct{ Flushed, Dropped, FlushErrors uint64 }

// Stats reads the counters.
func (s *Store) Stats() Stats {
	return Stats{Flushed: s.flushed.Load(), Dropped: s.dropped.Load(), FlushErrors: s.flushErrors.Load()}
}

// Mark records use of id now. It takes a mutex and writes a map entry.
func (s *Store) Mark(id string) {
	now := s.cfg.Now()
	s.mu.Lock()
	s.markLocked(id, now)
	s.mu.Unlock()
}

func (s *Store) markLocked(id string, now time.Time) {
	ms := now.UnixMilli()
	m, ok := s.pending[id]
	if !ok {
		m.since = now
	}
	if ms > m.at {
		m.at = ms
	}
	s.pending[id] = m
}

// Open counts a connection to id until close is called; while any is open
// this process heartbeats id as live.
func (s *Store) Open(id string) func() {
	now := s.cfg.Now()
	s.mu.Lock()
	s.markLocked(id, now)
	if s.open[id]++; s.open[id] == 1 {
		s.fresh[id] = struct{}{}
		delete(s.released, id)
	}
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			now := s.cfg.Now()
			s.mu.Lock()
			defer s.mu.Unlock()
			s.markLocked(id, now)
			if s.open[id]--; s.open[id] <= 0 {
				delete(s.open, id)
				delete(s.fresh, id)
				s.released[id] = struct{}{}
			}
		})
	}
}

// Prefix is the prefix of the store's keys.
func (s *Store) Prefix() string { return s.cfg.Prefix }

func (s *Store) key(name string) string { return s.cfg.Prefix + name }

func (s *Store) member(id string) string { return id + "|" + s.cfg.Instance }

// batch is what one flush writes.
type batch struct {
	marks    map[string]mark
	beat     []string // sandboxes to heartbeat
	release  []string // sandboxes whose member to remove
	fullBeat bool     // a heartbeat round: every open sandbox, plus trimming
	lost     bool     // marks were dropped since the last flush
}

// take moves pending work out under the lock.
func (s *Store) take(now time.Time, releaseAll bool) batch {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := batch{marks: s.pending}
	s.pending = map[string]mark{}
	b.fullBeat = now.Sub(s.lastBeat) >= s.cfg.HeartbeatTTL/3
	switch {
	case releaseAll:
		for id := range s.open {
			b.release = append(b.release, id)
		}
	case b.fullBeat:
		for id := range s.open {
			b.beat = append(b.beat, id)
		}
	default:
		for id := range s.fresh {
			b.beat = append(b.beat, id)
		}
	}
	s.fresh = map[string]struct{}{}
	for id := range s.released {
		b.release = append(b.release, id)
	}
	s.released = map[string]struct{}{}
	if b.fullBeat {
		s.lastBeat = now
	}
	b.lost, s.lost = s.lost, false
	return b
}

// giveBack returns a failed batch's work, dropping marks held past RetryFor.
func (s *Store) giveBack(b batch, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var dropped uint64
	for id, m := range b.marks {
		if now.Sub(m.since) > s.cfg.RetryFor {
			dropped++
			continue
		}
		cur, ok := s.pending[id]
		if ok && cur.at > m.at {
			m.at = cur.at
		}
		s.pending[id] = m // keeps the older since
	}
	s.dropped.Add(dropped)
	s.lost = s.lost || b.lost || dropped > 0
	for _, id := range b.beat {
		if s.open[id] > 0 {
			s.fresh[id] = struct{}{}
		}
	}
	for _, id := range b.release {
		if s.open[id] == 0 {
			s.released[id] = struct{}{}
		}
	}
	if b.fullBeat {
		s.lastBeat = time.Time{}
	}
}

// Flush writes pending marks and due heartbeats in one pipelined round
// trip. On failure the work is kept for the next flush, up to RetryFor.
// Failures are logged once when they start and once when a flush
// succeeds again: the loop flushes every second while Redis is away.
func (s *Store) Flush(ctx context.Context) error {
	err := s.flush(ctx, false)
	switch {
	case err == nil:
		s.flushLog.Succeeded(ctx)
	case !errors.Is(err, context.Canceled):
		s.flushLog.Failed(ctx, err)
	}
	return err
}

func (s *Store) flush(ctx context.Context, releaseAll bool) error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	now := s.cfg.Now()
	b := s.take(now, releaseAll)
	pipe := s.rdb.Pipeline()
	// First, so that the marks below are written in the epoch it returns.
	rotate := "0"
	if b.lost {
		rotate = "1"
	}
	ep := flushEpochScript.Eval(ctx, pipe,
		[]string{s.key("epoch"), s.key("flushes:" + s.cfg.Instance)},
		newEpoch(now), s.flushSeq, (s.cfg.RetryFor + s.cfg.HeartbeatTTL).Milliseconds(), rotate, s.epoch)
	if len(b.marks) > 0 {
		zs := make([]redis.Z, 0, len(b.marks))
		for id, m := range b.marks {
			zs = append(zs, redis.Z{Score: float64(m.at), Member: id})
		}
		pipe.ZAddGT(ctx, s.key("seen"), zs...)
	}
	if len(b.beat) > 0 {
		exp := float64(now.Add(s.cfg.HeartbeatTTL).UnixMilli())
		zs := make([]redis.Z, len(b.beat))
		for i, id := range b.beat {
			zs[i] = redis.Z{Score: exp, Member: s.member(id)}
		}
		pipe.ZAdd(ctx, s.key("live"), zs...)
	}
	if len(b.release) > 0 {
		ms := make([]any, len(b.release))
		for i, id := range b.release {
			ms[i] = s.member(id)
		}
		pipe.ZRem(ctx, s.key("live"), ms...)
	}
	if b.fullBeat {
		pipe.ZRemRangeByScore(ctx, s.key("live"), "-inf", strconv.FormatInt(now.UnixMilli(), 10))
		pipe.ZRemRangeByScore(ctx, s.key("seen"), "-inf", strconv.FormatInt(now.Add(-s.cfg.SeenTTL).UnixMilli(), 10))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		s.flushErrors.Add(1)
		s.giveBack(b, now)
		return fmt.Errorf("flush activity to redis: %w", err)
	}
	s.flushed.Add(uint64(len(b.marks)))
	res, err := ep.Slice()
	if err != nil || len(res) != 2 {
		return fmt.Errorf("flush activity to redis: epoch check answered %v, %v", res, err)
	}
	epoch, _ := res[0].(string)
	seq, _ := res[1].(int64)
	if s.epoch != "" && epoch != s.epoch {
		// Our heartbeats may be gone with the old records: send them all
		// at the next flush rather than the next heartbeat round.
		s.mu.Lock()
		s.lastBeat = time.Time{}
		s.mu.Unlock()
		s.cfg.Logger.Warn("activity records were lost; counting idleness afresh", "epoch", epoch)
	}
	s.epoch, s.flushSeq = epoch, seq
	return nil
}

// flushEpochScript counts this process's flush and returns the epoch the
// flush writes in. It starts a new one (ARGV[1]) when there is none, when
// asked to (ARGV[4] "1": marks were dropped), and when the counter did not
// move past the value this process last read back (ARGV[2]): the flushes
// that set it were lost. In that last case an epoch other than the one
// this process last wrote in (ARGV[5]) is kept unless it started before
// that one (an old snapshot restored): another process started it after
// the loss, so it already covers what was lost, and N processes learning
// of one loss start one epoch, not N. Names, not only start times, are
// compared: a loss can come within the millisecond its epoch began.
var flushEpochScript = redis.NewScript(`
local n = redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
local e = redis.call('GET', KEYS[1])
local regressed = false
if e and n <= tonumber(ARGV[2]) then
	local start = tonumber(string.match(e, '%.(%d+)$')) or 0
	local mine = tonumber(string.match(ARGV[5], '%.(%d+)$')) or 0
	regressed = e == ARGV[5] or start < mine
end
if (not e) or ARGV[4] == '1' or regressed then
	e = ARGV[1]
	redis.call('SET', KEYS[1], e)
end
return {e, n}
`)

// readEpochScript returns the epoch, starting one (ARGV[1]) if there is
// none, so that readers and writers agree on it whoever comes first.
var readEpochScript = redis.NewScript(`
local e = redis.call('GET', KEYS[1])
if not e then
	e = ARGV[1]
	redis.call('SET', KEYS[1], e)
end
return e
`)

// newEpoch names an epoch starting at now.
func newEpoch(now time.Time) string {
	return rand.Text() + "." + strconv.FormatInt(now.UnixMilli(), 10)
}

// epochStart reads the start out of an epoch value.
func epochStart(epoch string) (time.Time, error) {
	_, ms, ok := strings.Cut(epoch, ".")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil {
		return time.Time{}, fmt.Errorf("malformed activity epoch %q", epoch)
	}
	return time.UnixMilli(n), nil
}

func (s *Store) flushLoop(ctx context.Context) {
	defer s.wg.Done()
	flushEvery(ctx, s.cfg.FlushInterval, s.Flush)
}

// flushEvery calls flush every interval until ctx ends, each call bounded
// by an interval (at least a second), so a Redis that stopped answering
// delays the next flush by one bound, not forever. Apart from the Store
// so that its timing runs on a test's fake clock.
func flushEvery(ctx context.Context, interval time.Duration, flush func(context.Context) error) {
	tick.Every(ctx, interval, func() bool {
		fctx, cancel := context.WithTimeout(ctx, max(interval, time.Second))
		defer cancel()
		_ = flush(fctx) // logged by Flush
		return true
	})
}

func (s *Store) subscribeLoop() {
	defer s.wg.Done()
	for msg := range s.pubsub.Channel() {
		s.fanout.Notify(msg.Payload)
	}
}

// Status reads ids' last-seen marks and live connections from Redis, merged
// with this process's unflushed marks and open connections.
func (s *Store) Status(ctx context.Context, ids []string) (map[string]activity.Status, error) {
	if len(ids) == 0 {
		return map[string]activity.Status{}, nil
	}
	now := s.cfg.Now()
	pipe := s.rdb.Pipeline()
	// First: marks read below belong to this epoch or a later one, never
	// to an earlier one.
	ep := readEpochScript.Eval(ctx, pipe, []string{s.key("epoch")}, newEpoch(now))
	seen := pipe.ZMScore(ctx, s.key("seen"), ids...)
	live := pipe.ZRangeArgs(ctx, redis.ZRangeArgs{
		Key: s.key("live"), ByScore: true,
		Start: "(" + strconv.FormatInt(now.UnixMilli(), 10), Stop: "+inf",
	})
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("read activity from redis: %w", err)
	}
	epoch, _ := ep.Val().(string)
	start, err := epochStart(epoch)
	if err != nil {
		return nil, fmt.Errorf("read activity from redis: %w", err)
	}
	liveIDs := map[string]bool{}
	for _, m := range live.Val() {
		if id, _, ok := strings.Cut(m, "|"); ok {
			liveIDs[id] = true
		}
	}
	scores := seen.Val()
	out := make(map[string]activity.Status, len(ids))
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, id := range ids {
		st := activity.Status{Epoch: epoch, EpochStart: start}
		if i < len(scores) && scores[i] > 0 {
			st.LastSeen = time.UnixMilli(int64(scores[i]))
		}
		if m, ok := s.pending[id]; ok && m.at > st.LastSeen.UnixMilli() {
			st.LastSeen = time.UnixMilli(m.at)
		}
		st.Live = liveIDs[id] || s.open[id] > 0
		out[id] = st
	}
	return out, nil
}

// Publish notifies subscribers of id here at once and in every other
// process through Redis.
func (s *Store) Publish(ctx context.Context, id string) error {
	s.fanout.Notify(id)
	if err := s.rdb.Publish(ctx, s.key("wake"), id).Err(); err != nil {
		return fmt.Errorf("publish wake for %s: %w", id, err)
	}
	return nil
}

// Subscribe registers for notifications about id.
func (s *Store) Subscribe(id string) (<-chan struct{}, func()) { return s.fanout.Subscribe(id) }

// Close stops the loops, then writes the last marks and removes this
// process's heartbeats (best effort, bounded).
func (s *Store) Close() error {
	if !s.stop() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return s.flush(ctx, true)
}

// Halt stops the loops without writing anything, leaving heartbeats to
// lapse as a crashed process's would. For failure tests and for shutting
// down when Redis is known to be gone.
func (s *Store) Halt() { s.stop() }

func (s *Store) stop() bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	_ = s.pubsub.Close()
	s.wg.Wait()
	return true
}

// LogLibraryTo sends go-redis's own log lines to log at DEBUG. While
// Redis is away go-redis logs every failed dial of its pool and of a
// subscription's reconnection, several lines a second, on stderr in a
// format of its own; the stores report the outage themselves, once.
// go-redis has one logger per process: the last call wins.
func LogLibraryTo(log *slog.Logger) { redis.SetLogger(libraryLog{log}) }

type libraryLog struct{ log *slog.Logger }

func (l libraryLog) Printf(ctx context.Context, format string, v ...any) {
	if l.log.Enabled(ctx, slog.LevelDebug) {
		l.log.DebugContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
	}
}

// OpenClient opens a process's one Redis client on url (NewClient's
// short timeouts), with go-redis's own log lines at DEBUG in log; an empty
// url means no Redis, and a nil client. Control and the edge open theirs
// here and share it among their parts.
func OpenClient(url string, log *slog.Logger) (*redis.Client, error) {
	if url == "" {
		return nil, nil
	}
	LogLibraryTo(log)
	c, err := NewClient(url)
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	return c, nil
}

// NewClient builds a Redis client from a redis:// URL with timeouts short
// enough that a flush or a read against an unreachable Redis fails within
// about a second instead of stalling the idle detector or the flush loop.
func NewClient(url string) (*redis.Client, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("parse redis URL: %w", err)
	}
	opt.DialTimeout = time.Second
	opt.ReadTimeout = time.Second
	opt.WriteTimeout = time.Second
	opt.MaxRetries = 1
	return redis.NewClient(opt), nil
}
