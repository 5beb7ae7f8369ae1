package redisstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/sbxedge/sbx/activity"
	"github.com/sbxedge/sbx/activity/activitytest"
	"github.com/sbxedge/sbx/activity/redisstore"
	"github.com/sbxedge/sbx/internal/testkit/closedport"
	"github.com/sbxedge/sbx/internal/testkit/metrictest"
	"github.com/sbxedge/sbx/internal/testkit/tcpproxy"
)

const redisAddr = "127.0.0.1:6379"

// quietLogger hides go-redis's reconnect chatter in the outage tests.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{})
	goleak.VerifyTestMain(m)
}

// prefix returns a key prefix of the test's own and deletes its keys when
// the test ends.
func prefix(t *testing.T) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	p := "sbxtest:" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() { deletePrefix(t, p) })
	return p
}

// deletePrefix deletes every key under p on the shared Redis: the test's
// own FLUSHALL.
func deletePrefix(t *testing.T, p string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer c.Close()
	ctx := context.Background()
	keys, err := c.Keys(ctx, p+"*").Result()
	if err == nil && len(keys) > 0 {
		err = c.Del(ctx, keys...).Err()
	}
	if err != nil {
		t.Errorf("delete %s*: %v", p, err)
	}
}

func client(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c, err := redisstore.NewClient("redis://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newStore(t *testing.T, cfg redisstore.Config) *redisstore.Store {
	t.Helper()
	if cfg.Client == nil {
		cfg.Client = client(t, redisAddr)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = prefix(t)
	}
	if cfg.FlushInterval == 0 {
		cfg.FlushInterval = time.Hour // tests flush explicitly
	}
	s, err := redisstore.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	activitytest.Run(t, activitytest.Backend{
		New: func(t *testing.T) activity.Store { return newStore(t, redisstore.Config{}) },
		// The store's keys vanish under it, as in a FLUSHALL or a restart
		// of an unpersisted Redis; the same store goes on.
		Lose: func(t *testing.T, s activity.Store) activity.Store {
			deletePrefix(t, s.(*redisstore.Store).Prefix())
			return s
		},
	})
}

// fakeClock is a settable clock.
type fakeClock struct{ off atomic.Int64 }

func (c *fakeClock) Now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *fakeClock) Advance(d time.Duration) { c.off.Add(int64(d)) }

func status(t *testing.T, s activity.Store, id string) activity.Status {
	t.Helper()
	m, err := s.Status(context.Background(), []string{id})
	if err != nil {
		t.Fatal(err)
	}
	return m[id]
}

// flush flushes s's marks and fails the test if it cannot.
func flush(t *testing.T, s *redisstore.Store) {
	t.Helper()
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// replicas are two stores on one fresh prefix, as an edge and control
// share Redis.
func replicas(t *testing.T) (edge, ctl *redisstore.Store, p string) {
	t.Helper()
	p = prefix(t)
	return newStore(t, redisstore.Config{Prefix: p}), newStore(t, redisstore.Config{Prefix: p}), p
}

func TestSharedAcrossReplicas(t *testing.T) {
	t.Parallel()
	edge, ctl, _ := replicas(t)

	edge.Mark("sbx-a")
	closeB := edge.Open("sbx-b")
	if got := status(t, ctl, "sbx-a"); !got.LastSeen.IsZero() {
		t.Fatalf("before flush control saw %+v; marks must be coalesced until a flush", got)
	}
	flush(t, edge)
	if got := status(t, ctl, "sbx-a"); got.LastSeen.IsZero() || got.Live {
		t.Fatalf("sbx-a: got %+v, want seen, not live", got)
	}
	if got := status(t, ctl, "sbx-b"); !got.Live {
		t.Fatalf("sbx-b: got %+v, want live", got)
	}
	closeB()
	flush(t, edge)
	if got := status(t, ctl, "sbx-b"); got.Live {
		t.Fatalf("sbx-b after close: got %+v, want not live", got)
	}
}

func TestLastSeenNeverMovesBack(t *testing.T) {
	t.Parallel()
	p := prefix(t)
	var late, early fakeClock
	late.Advance(time.Minute)
	a := newStore(t, redisstore.Config{Prefix: p, Now: late.Now})
	b := newStore(t, redisstore.Config{Prefix: p, Now: early.Now})
	a.Mark("sbx-x")
	flush(t, a)
	want := status(t, a, "sbx-x").LastSeen
	b.Mark("sbx-x") // an older mark flushed later
	flush(t, b)
	if got := status(t, a, "sbx-x").LastSeen; !got.Equal(want) {
		t.Fatalf("LastSeen = %v after an older flush, want %v", got, want)
	}
}

// A crashed process (Halt: nothing released) pins a sandbox only until its
// heartbeat lapses; a clean Close releases at once.
func TestHeartbeatLapsesAfterCrash(t *testing.T) {
	t.Parallel()
	p := prefix(t)
	var clk fakeClock
	ttl := 30 * time.Second
	crashed := newStore(t, redisstore.Config{Prefix: p, HeartbeatTTL: ttl})
	clean := newStore(t, redisstore.Config{Prefix: p, HeartbeatTTL: ttl})
	reader := newStore(t, redisstore.Config{Prefix: p, Now: clk.Now})

	crashed.Open("sbx-crash")
	clean.Open("sbx-clean")
	for _, s := range []*redisstore.Store{crashed, clean} {
		flush(t, s)
	}
	crashed.Halt()
	if err := clean.Close(); err != nil {
		t.Fatal(err)
	}
	if !status(t, reader, "sbx-crash").Live {
		t.Fatal("crashed process's connection should stay live until its heartbeat lapses")
	}
	if status(t, reader, "sbx-clean").Live {
		t.Fatal("a cleanly closed store must release its connections")
	}
	clk.Advance(ttl + time.Second)
	if status(t, reader, "sbx-crash").Live {
		t.Fatal("heartbeat did not lapse after its TTL")
	}
}

// Heartbeats are refreshed every TTL/3, so a long open connection stays
// live past its first TTL.
func TestHeartbeatRefreshed(t *testing.T) {
	t.Parallel()
	p := prefix(t)
	var clk fakeClock
	ttl := 30 * time.Second
	edge := newStore(t, redisstore.Config{Prefix: p, HeartbeatTTL: ttl, Now: clk.Now})
	reader := newStore(t, redisstore.Config{Prefix: p, Now: clk.Now})
	defer edge.Open("sbx-long")()
	for range 10 { // 10 x 12 s = 2 minutes, four TTLs
		flush(t, edge)
		clk.Advance(ttl/3 + 2*time.Second)
		if !status(t, reader, "sbx-long").Live {
			t.Fatalf("open connection lapsed at %v", clk.Now())
		}
	}
}

// Thousands of marks on a few sandboxes become one write per sandbox.
func TestMarksCoalesce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := client(t, redisAddr)
	var cmds atomic.Int64
	c.AddHook(countHook{&cmds})
	s := newStore(t, redisstore.Config{Client: c})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 5000 {
				s.Mark([]string{"sbx-1", "sbx-2", "sbx-3"}[(g+i)%3])
			}
		})
	}
	wg.Wait()
	if err := c.Ping(ctx).Err(); err != nil { // dial before counting
		t.Fatal(err)
	}
	before := cmds.Load()
	flush(t, s)
	if got := s.Stats().Flushed; got != 3 {
		t.Fatalf("flushed %d marks for 40000 calls on 3 sandboxes, want 3", got)
	}
	// The epoch check, ZADD seen, and on the first flush the two trims of a
	// heartbeat round.
	if got := cmds.Load() - before; got > 4 {
		t.Fatalf("flush sent %d commands, want at most 4 (epoch, ZADD and two trims)", got)
	}
}

// With Redis unreachable, Mark and Open still return at once, reads fail
// (so the idle detector suspends nothing), and marks are dropped and
// counted once the retry window passes.
func TestRedisUnreachable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dead := fmt.Sprintf("127.0.0.1:%d", closedport.New(t).N) // nothing listens there
	var clk fakeClock
	reg := prometheus.NewRegistry()
	s := newStore(t, redisstore.Config{Client: client(t, dead), RetryFor: 10 * time.Second, Now: clk.Now, Registry: reg})

	start := time.Now()
	for i := range 1000 {
		s.Mark([]string{"sbx-1", "sbx-2"}[i%2])
	}
	s.Open("sbx-3")()
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Fatalf("marking took %v with Redis down; it must not wait for Redis", d)
	}
	if _, err := s.Status(ctx, []string{"sbx-1"}); err == nil {
		t.Fatal("Status succeeded with Redis down; the idle detector would act on missing data")
	}
	if err := s.Flush(ctx); err == nil {
		t.Fatal("flush succeeded with Redis down")
	}
	if got := s.Stats().Dropped; got != 0 {
		t.Fatalf("dropped %d marks inside the retry window, want 0", got)
	}
	clk.Advance(11 * time.Second)
	if err := s.Flush(ctx); err == nil {
		t.Fatal("flush succeeded with Redis down")
	}
	if got := s.Stats().Dropped; got != 3 {
		t.Fatalf("dropped %d marks after the retry window, want 3 (sbx-1, sbx-2, sbx-3)", got)
	}
	if got := metrictest.Series(t, reg, "sbx_activity_marks_dropped_total").GetCounter().GetValue(); got != 3 {
		t.Fatalf("sbx_activity_marks_dropped_total = %v, want 3", got)
	}
}

// Marks held while Redis is away are written once it is back, within the
// retry window.
func TestRetriedAfterOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	px := tcpproxy.New(t, redisAddr)
	p := prefix(t)
	s := newStore(t, redisstore.Config{Client: client(t, px.Addr), Prefix: p})
	reader := newStore(t, redisstore.Config{Prefix: p})

	px.Stop()
	s.Mark("sbx-held")
	if err := s.Flush(ctx); err == nil {
		t.Fatal("flush through a stopped proxy succeeded")
	}
	px.Start(t)
	if err := s.Flush(ctx); err != nil {
		t.Fatalf("flush after Redis came back: %v", err)
	}
	if status(t, reader, "sbx-held").LastSeen.IsZero() {
		t.Fatal("mark held during the outage was lost")
	}
	if got := s.Stats(); got.Dropped != 0 || got.FlushErrors == 0 {
		t.Fatalf("stats %+v, want no drops and at least one flush error", got)
	}
}

func TestPublishAcrossProcesses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := prefix(t)
	a := newStore(t, redisstore.Config{Prefix: p})
	b := newStore(t, redisstore.Config{Prefix: p})
	ch, cancel := b.Subscribe("sbx-w")
	defer cancel()
	// The subscription is asynchronous: publish until it arrives.
	deadline := time.After(5 * time.Second)
	for {
		if err := a.Publish(ctx, "sbx-w"); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
			return
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatal("notification never crossed processes")
		}
	}
}

// countHook counts commands sent to Redis, pipelined ones included, but
// not the HELLO and CLIENT SETINFO every new connection sends.
type countHook struct{ n *atomic.Int64 }

func (h countHook) count(c redis.Cmder) {
	if n := c.Name(); n != "client" && n != "hello" {
		h.n.Add(1)
	}
}

func (h countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}
func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.count(c)
		}
		return next(ctx, cmds)
	}
}

// Every process sharing a prefix reads the same epoch, whoever wrote
// first.
func TestEpochShared(t *testing.T) {
	t.Parallel()
	edge, ctl, _ := replicas(t)
	edge.Mark("sbx-e")
	flush(t, edge)
	a, b := status(t, ctl, "sbx-e"), status(t, edge, "sbx-e")
	if a.Epoch == "" || a.Epoch != b.Epoch || !a.EpochStart.Equal(b.EpochStart) {
		t.Fatalf("control reads epoch %s@%v, edge %s@%v; want one named epoch", a.Epoch, a.EpochStart, b.Epoch, b.EpochStart)
	}
}

// snapshot copies every key under p (DUMP), and restore puts them back
// (RESTORE REPLACE), deleting keys written since: what a replica that
// missed the latest writes looks like once it is promoted.
func snapshot(t *testing.T, c *redis.Client, p string) map[string]string {
	t.Helper()
	ctx := context.Background()
	keys, err := c.Keys(ctx, p+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range keys {
		if typ := c.Type(ctx, k).Val(); typ == "none" {
			continue
		}
		v, err := c.Dump(ctx, k).Result()
		if err != nil {
			t.Fatalf("dump %s: %v", k, err)
		}
		out[k] = v
	}
	return out
}

func restore(t *testing.T, c *redis.Client, p string, snap map[string]string) {
	t.Helper()
	ctx := context.Background()
	keys, err := c.Keys(ctx, p+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if _, ok := snap[k]; !ok {
			c.Del(ctx, k)
		}
	}
	for k, v := range snap {
		if err := c.RestoreReplace(ctx, k, 0, v).Err(); err != nil {
			t.Fatalf("restore %s: %v", k, err)
		}
	}
}

// A failover to a replica that missed the latest writes keeps the epoch
// key but loses marks. The writer whose flush was lost sees its own flush
// counter go back and starts a new epoch, so the stale last-seen cannot
// make a sandbox used seconds ago look idle.
func TestStaleReplicaStartsNewEpoch(t *testing.T) {
	t.Parallel()
	edge, ctl, p := replicas(t)
	c := client(t, redisAddr)

	edge.Mark("sbx-r")
	flush(t, edge)
	replica := snapshot(t, c, p) // replication stops here
	edge.Mark("sbx-r")
	flush(t, edge)
	before := status(t, ctl, "sbx-r")
	restore(t, c, p, replica) // the replica is promoted
	flush(t, edge)
	after := status(t, ctl, "sbx-r")
	if after.Epoch == before.Epoch {
		t.Fatalf("epoch %s kept after a failover lost a flush", after.Epoch)
	}
	if !after.EpochStart.After(before.EpochStart) {
		t.Fatalf("new EpochStart %v is not after the old %v", after.EpochStart, before.EpochStart)
	}
	// Nothing lost since: the epoch holds.
	flush(t, edge)
	if got := status(t, ctl, "sbx-r"); got.Epoch != after.Epoch {
		t.Fatalf("epoch moved again (%s -> %s) with nothing lost", after.Epoch, got.Epoch)
	}
}

// A writer that finds its records lost re-sends the heartbeats of its open
// connections at its next flush instead of the next heartbeat round, so an
// open session reads live again within a flush interval.
func TestLossResendsHeartbeats(t *testing.T) {
	t.Parallel()
	edge, ctl, p := replicas(t)
	defer edge.Open("sbx-open")()
	flush(t, edge)
	deletePrefix(t, p)
	for range 2 { // the first flush learns of the loss, the second repairs
		flush(t, edge)
	}
	if !status(t, ctl, "sbx-open").Live {
		t.Fatal("open connection not live two flushes after the records were lost")
	}
}

// Marks dropped after the retry window are lost activity too: the writer
// starts a new epoch once it reaches Redis again.
func TestDroppedMarksStartNewEpoch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	px := tcpproxy.New(t, redisAddr)
	p := prefix(t)
	var clk fakeClock
	edge := newStore(t, redisstore.Config{Client: client(t, px.Addr), Prefix: p, RetryFor: 10 * time.Second, Now: clk.Now})
	ctl := newStore(t, redisstore.Config{Prefix: p, Now: clk.Now})
	edge.Mark("sbx-d")
	flush(t, edge)
	before := status(t, ctl, "sbx-d")
	px.Stop()
	edge.Mark("sbx-d")
	if err := edge.Flush(ctx); err == nil {
		t.Fatal("flush through a stopped proxy succeeded")
	}
	clk.Advance(11 * time.Second)
	if err := edge.Flush(ctx); err == nil {
		t.Fatal("flush through a stopped proxy succeeded")
	}
	if edge.Stats().Dropped == 0 {
		t.Fatal("no mark dropped after the retry window")
	}
	px.Start(t)
	flush(t, edge)
	if got := status(t, ctl, "sbx-d"); got.Epoch == before.Epoch {
		t.Fatalf("epoch %s kept after marks were dropped", got.Epoch)
	}
}

// TestLossInTheEpochsMillisecond: records lost in the same millisecond
// as the epoch they held (a fast machine, a frozen clock here) start one
// new epoch, not two. The reader starts the new epoch; the next flush,
// whose flush counter went with the records, must keep it rather than
// take it for the lost one (make test saw the epoch move twice).
func TestLossInTheEpochsMillisecond(t *testing.T) {
	at := time.Now()
	s := newStore(t, redisstore.Config{Now: func() time.Time { return at }})
	const sb = "sbx-frozen-clock"
	s.Mark(sb)
	flush(t, s)
	before := status(t, s, sb)
	deletePrefix(t, s.Prefix())
	after := status(t, s, sb)
	if after.Epoch == before.Epoch {
		t.Fatalf("epoch %s survived the loss of its records", after.Epoch)
	}
	s.Mark(sb)
	flush(t, s)
	if got := status(t, s, sb); got.Epoch != after.Epoch || got.LastSeen.IsZero() {
		t.Fatalf("after marking in the new epoch got %+v, want epoch %s and seen", got, after.Epoch)
	}
}
