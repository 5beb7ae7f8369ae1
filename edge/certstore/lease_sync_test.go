package certstore

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
)

// leaseRedis is the part of Redis the locks use (SET NX PX and the renew
// and unlock scripts), in memory on the caller's clock, so the lease runs
// on synctest's fake time: a real connection would not block durably.
type leaseRedis struct {
	redis.UniversalClient // nil: a call outside SetNX/EvalSha panics

	mu     sync.Mutex
	keys   map[string]lease
	renews []time.Time // when a renew found the lock its caller's
}

type lease struct {
	token string
	until time.Time
}

func newLeaseRedis() *leaseRedis { return &leaseRedis{keys: map[string]lease{}} }

// get is key's lease if it has not lapsed; the caller holds mu.
func (f *leaseRedis) get(key string) (lease, bool) {
	l, ok := f.keys[key]
	if ok && !time.Now().Before(l.until) {
		delete(f.keys, key)
		return lease{}, false
	}
	return l, ok
}

func (f *leaseRedis) SetNX(ctx context.Context, key string, value any, ttl time.Duration) *redis.BoolCmd {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, held := f.get(key); held {
		return redis.NewBoolResult(false, nil)
	}
	f.keys[key] = lease{token: value.(string), until: time.Now().Add(ttl)}
	return redis.NewBoolResult(true, nil)
}

func (f *leaseRedis) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, held := f.get(keys[0])
	if !held || l.token != args[0].(string) {
		return redis.NewCmdResult(int64(0), nil)
	}
	switch sha {
	case renewScript.Hash():
		l.until = time.Now().Add(time.Duration(args[1].(int64)) * time.Millisecond)
		f.keys[keys[0]] = l
		f.renews = append(f.renews, time.Now())
	case unlockScript.Hash():
		delete(f.keys, keys[0])
	default:
		panic("leaseRedis: unknown script " + sha)
	}
	return redis.NewCmdResult(int64(1), nil)
}

func (f *leaseRedis) state(key string) (renews []time.Time, held lease, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	held, ok = f.get(key)
	return append([]time.Time(nil), f.renews...), held, ok
}

// TestLockLeaseOnFakeClock runs a lock's lease on synctest's clock: the
// holder renews it every third of LockTTL and not before, so it never
// lapses however long the holder keeps it and another replica waits; a
// holder that stops renewing (a crash) frees the lock exactly one lease
// after its last renewal, to the waiter's next poll.
func TestLockLeaseOnFakeClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rdb := newLeaseRedis()
		a, b := New(rdb, "p:"), New(rdb, "p:")
		defer b.Close()
		ttl, key := a.lockTTL, a.lockKey("x")
		if err := a.Lock(t.Context(), "x"); err != nil {
			t.Fatal(err)
		}
		start := time.Now()

		time.Sleep(ttl/3 - time.Nanosecond)
		synctest.Wait()
		if renews, _, _ := rdb.state(key); len(renews) != 0 {
			t.Fatalf("renewed at %v, before a third of the lease", renews[0].Sub(start))
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if renews, l, ok := rdb.state(key); len(renews) != 1 || !ok || !l.until.Equal(start.Add(ttl/3+ttl)) {
			t.Fatalf("at a third of the lease: %d renewals, lease until %v (held %v); want 1, until %v",
				len(renews), l.until.Sub(start), ok, ttl/3+ttl)
		}

		var bHolds atomic.Bool
		bDone := make(chan error, 1)
		go func() {
			err := b.Lock(t.Context(), "x")
			bHolds.Store(err == nil)
			bDone <- err
		}()
		time.Sleep(10 * ttl)
		synctest.Wait()
		renews, _, ok := rdb.state(key)
		if !ok || bHolds.Load() {
			t.Fatalf("after ten leases held: lease held %v, other replica holds %v; want the lease kept", ok, bHolds.Load())
		}
		if want := int((10*ttl + ttl/3) / (ttl / 3)); len(renews) != want {
			t.Fatalf("%d renewals over ten leases, want %d", len(renews), want)
		}

		a.Close() // stops renewing, as a crashed process would
		last := renews[len(renews)-1]
		time.Sleep(time.Until(last.Add(ttl)) - time.Nanosecond)
		synctest.Wait()
		if bHolds.Load() {
			t.Fatal("the other replica took the lock before the crashed holder's lease ran out")
		}
		time.Sleep(b.poll)
		synctest.Wait()
		select {
		case err := <-bDone:
			if err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("the other replica still waits a poll (%v) after the crashed holder's lease ran out", b.poll)
		}
		if err := b.Unlock(t.Context(), "x"); err != nil {
			t.Fatal(err)
		}
		if _, _, ok := rdb.state(key); ok {
			t.Error("lock still held after Unlock")
		}
	})
}
