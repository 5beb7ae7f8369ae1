package redisstore

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// flushLog records when a flush ran and how it ended.
type flushLog struct {
	mu    sync.Mutex
	at    []time.Time
	ended []error
	hang  bool // a flush waits for its deadline, as against a silent Redis
}

func (l *flushLog) flush(ctx context.Context) error {
	l.mu.Lock()
	l.at = append(l.at, time.Now())
	hang := l.hang
	l.mu.Unlock()
	var err error
	if hang {
		<-ctx.Done()
		err = ctx.Err()
	}
	l.mu.Lock()
	l.ended = append(l.ended, err)
	l.mu.Unlock()
	return err
}

func (l *flushLog) get() (at []time.Time, ended []error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Time(nil), l.at...), append([]error(nil), l.ended...)
}

// TestFlushEveryClock runs the flush loop on synctest's fake clock: no
// flush before the first interval, one per interval after it; a flush
// against a Redis that does not answer is cut after its bound (a second,
// longer than this interval) and the next starts at once; the loop's
// goroutine ends with its context.
func TestFlushEveryClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const every = 200 * time.Millisecond
		var l flushLog
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			flushEvery(ctx, every, l.flush)
		}()
		start := time.Now()
		want := func(when string, n int) []time.Time {
			t.Helper()
			synctest.Wait()
			at, _ := l.get()
			if len(at) != n {
				t.Fatalf("%s: %d flushes, want %d", when, len(at), n)
			}
			return at
		}

		time.Sleep(every - time.Nanosecond)
		want("just before the first interval", 0)
		time.Sleep(time.Nanosecond)
		want("at the first interval", 1)
		time.Sleep(4 * every)
		for i, at := range want("four intervals on", 5) {
			if got := at.Sub(start); got != time.Duration(i+1)*every {
				t.Errorf("flush %d at %v, want %v", i, got, time.Duration(i+1)*every)
			}
		}

		l.mu.Lock()
		l.hang = true
		l.mu.Unlock()
		hungAt := time.Now()
		time.Sleep(every)
		want("a flush that hangs", 6)
		time.Sleep(time.Second - time.Nanosecond)
		if _, ended := l.get(); len(ended) != 5 {
			t.Fatalf("the hung flush ended %v after it began, want a second", time.Since(hungAt)-every)
		}
		time.Sleep(time.Nanosecond)
		at := want("its bound over", 7)
		_, ended := l.get()
		if !errors.Is(ended[5], context.DeadlineExceeded) {
			t.Errorf("the hung flush ended with %v, want its deadline", ended[5])
		}
		if got := at[6].Sub(at[5]); got != time.Second {
			t.Errorf("next flush %v after the hung one began, want at once when it was cut (1s)", got)
		}

		cancel()
		<-done
		l.mu.Lock()
		l.hang = false
		l.mu.Unlock()
		time.Sleep(10 * every)
		want("after stop", 7)
	})
}
