package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sbxedge/sbx/activity/redisstore"
)

// BenchmarkRedisLoad measures Redis commands per second at 1,000 active
// sandboxes, each with an open connection and continuous traffic, against
// the flush interval and the marking rate. Run with -benchtime=1x; each
// case marks for a 3 s window. Commands are counted by a client hook and,
// as a cross-check, by INFO commandstats (server-wide, so other tests
// running on the same Redis inflate it).
func BenchmarkRedisLoad(b *testing.B) {
	const sandboxes = 1000
	window := 3 * time.Second
	ids := make([]string, sandboxes)
	for i := range ids {
		ids[i] = fmt.Sprintf("sbx-bench-%04d", i)
	}
	for _, flush := range []time.Duration{100 * time.Millisecond, 250 * time.Millisecond, time.Second} {
		for _, rate := range []string{"unthrottled", "1-per-sandbox-per-100ms"} {
			b.Run(fmt.Sprintf("flush=%v/marks=%s", flush, rate), func(b *testing.B) {
				for range b.N {
					runLoad(b, ids, flush, rate == "unthrottled", window)
				}
			})
		}
	}
}

func runLoad(b *testing.B, ids []string, flush time.Duration, unthrottled bool, window time.Duration) {
	ctx := context.Background()
	c, err := redisstore.NewClient("redis://" + redisAddr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	var cmds atomic.Int64
	c.AddHook(countHook{&cmds})
	p := fmt.Sprintf("sbxbench:%d:", time.Now().UnixNano())
	defer func() {
		if keys, _ := c.Keys(ctx, p+"*").Result(); len(keys) > 0 {
			c.Del(ctx, keys...)
		}
	}()
	s, err := redisstore.New(redisstore.Config{Client: c, Prefix: p, FlushInterval: flush})
	if err != nil {
		b.Fatal(err)
	}
	for _, id := range ids {
		defer s.Open(id)()
	}
	if err := c.Ping(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	serverBefore := serverCommands(b, c)
	cmds.Store(0)
	var marks atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	for g := range 4 {
		wg.Go(func() {
			var n int64
			for i := g; ; i++ {
				select {
				case <-stop:
					marks.Add(n)
					return
				default:
				}
				s.Mark(ids[i%len(ids)])
				n++
				if !unthrottled && i%len(ids) == len(ids)-1 {
					time.Sleep(100 * time.Millisecond)
				}
			}
		})
	}
	time.Sleep(window)
	close(stop)
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	sent := cmds.Load()
	serverDelta := serverCommands(b, c) - serverBefore
	flushed := s.Stats().Flushed
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(marks.Load())/elapsed, "marks/s")
	b.ReportMetric(float64(sent)/elapsed, "redis_cmds/s")
	b.ReportMetric(float64(serverDelta)/elapsed, "server_cmds/s")
	b.ReportMetric(float64(flushed)/elapsed, "sandbox_writes/s")
}

// serverCommands sums calls across INFO commandstats.
func serverCommands(b *testing.B, c *redis.Client) int64 {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total int64
	for line := range strings.SplitSeq(info, "\n") {
		_, rest, ok := strings.Cut(line, ":calls=")
		if !ok {
			continue
		}
		n, _, _ := strings.Cut(rest, ",")
		v, _ := strconv.ParseInt(n, 10, 64)
		total += v
	}
	return total
}
