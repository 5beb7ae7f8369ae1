package certstore

import (
	"context"
	"errors"
	"io/fs"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newRedis gives each test its own key prefix on the real Redis and
// removes its keys after.
func newRedis(t *testing.T) (*redis.Client, string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	if err := rdb.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("Redis at 127.0.0.1:6379 is required: %v", err)
	}
	prefix := "sbxtest:certstore:" + t.Name() + ":" + time.Now().Format("150405.000000") + ":"
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := rdb.Keys(ctx, prefix+"*").Result()
		if len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
		rdb.Close()
	})
	return rdb, prefix
}

func TestStorage(t *testing.T) {
	t.Parallel()
	rdb, prefix := newRedis(t)
	s := New(rdb, prefix)
	defer s.Close()
	ctx := t.Context()

	if _, err := s.Load(ctx, "certificates/x/a.crt"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load(missing): %v, want fs.ErrNotExist", err)
	}
	for _, k := range []string{"certificates/acme/a.example/a.crt", "certificates/acme/a.example/a.key", "certificates/acme/b.example/b.crt", "acme/users/u.json"} {
		if err := s.Store(ctx, k, []byte("value of "+k)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Load(ctx, "/certificates/acme/a.example/a.crt")
	if err != nil || string(got) != "value of certificates/acme/a.example/a.crt" {
		t.Errorf("Load: %q %v", got, err)
	}
	if !s.Exists(ctx, "certificates/acme") || !s.Exists(ctx, "acme/users/u.json") || s.Exists(ctx, "certificates/acm") {
		t.Error("Exists: wrong for a directory, a file or a prefix that is not a directory")
	}
	list, err := s.List(ctx, "certificates/acme", false)
	if err != nil || !slices.Equal(list, []string{"certificates/acme/a.example", "certificates/acme/b.example"}) {
		t.Errorf("List non-recursive: %v %v", list, err)
	}
	list, err = s.List(ctx, "certificates", true)
	if err != nil || len(list) != 3 {
		t.Errorf("List recursive: %v %v, want 3 keys", list, err)
	}
	info, err := s.Stat(ctx, "acme/users/u.json")
	if err != nil || !info.IsTerminal || info.Size != int64(len("value of acme/users/u.json")) || time.Since(info.Modified) > time.Minute {
		t.Errorf("Stat(file): %+v %v", info, err)
	}
	if info, err := s.Stat(ctx, "certificates"); err != nil || info.IsTerminal {
		t.Errorf("Stat(dir): %+v %v", info, err)
	}
	if err := s.Delete(ctx, "certificates/acme/a.example"); err != nil {
		t.Fatal(err)
	}
	if s.Exists(ctx, "certificates/acme/a.example/a.key") || !s.Exists(ctx, "certificates/acme/b.example/b.crt") {
		t.Error("Delete of a directory removed the wrong keys")
	}
	if err := s.Delete(ctx, "nothing/here"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Delete(missing): %v", err)
	}
}

// TestLockExcludesAcrossReplicas: two storages on the same Redis are two
// replicas; only one holds a lock at a time.
func TestLockExcludesAcrossReplicas(t *testing.T) {
	t.Parallel()
	rdb, prefix := newRedis(t)
	a, b := New(rdb, prefix), New(rdb, prefix)
	a.poll, b.poll = 10*time.Millisecond, 10*time.Millisecond
	defer a.Close()
	defer b.Close()
	var holders, maxHolders atomic.Int32
	var wg sync.WaitGroup
	for i := range 8 {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Lock(t.Context(), "issue_cert_x"); err != nil {
				t.Error(err)
				return
			}
			n := holders.Add(1)
			if n > maxHolders.Load() {
				maxHolders.Store(n)
			}
			time.Sleep(20 * time.Millisecond)
			holders.Add(-1)
			if err := s.Unlock(t.Context(), "issue_cert_x"); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if maxHolders.Load() != 1 {
		t.Errorf("%d holders at once, want 1", maxHolders.Load())
	}
	// A lock is honoured until ctx ends.
	if err := a.Lock(t.Context(), "held"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if err := b.Lock(ctx, "held"); err == nil {
		t.Error("second replica took a held lock")
	}
	// A crashed holder's lease runs out.
	crashed := New(rdb, prefix)
	crashed.lockTTL = 200 * time.Millisecond
	if err := crashed.Lock(t.Context(), "crash"); err != nil {
		t.Fatal(err)
	}
	crashed.Close() // stops renewing, as a dead process would
	start := time.Now()
	if err := b.Lock(t.Context(), "crash"); err != nil || time.Since(start) > 5*time.Second {
		t.Errorf("lock after the holder died: %v after %s", err, time.Since(start))
	}
	_ = b.Unlock(t.Context(), "crash")
	_ = a.Unlock(t.Context(), "held")
}
