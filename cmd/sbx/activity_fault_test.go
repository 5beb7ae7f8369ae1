package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/sbxedge/sbx/internal/testkit/redistest"
)

// traffic runs `exec true` on one sandbox every interval until stopped, as
// a user or agent working in it would. Every call must succeed: serving
// goes on whatever the activity store does.
type traffic struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex // guards the fields below
	next   time.Time  // when the next call starts
	last   time.Time  // when the last completed call started
	calls  int
	fails  []string
}

// execEvery starts traffic to id on p, the first call at first. It uses its
// own HTTP client, since p.call may not fail the test from another
// goroutine.
func (p *devProc) execEvery(id string, every time.Duration, first time.Time) *traffic {
	ctx, cancel := context.WithCancel(context.Background())
	tr := &traffic{cancel: cancel, done: make(chan struct{}), next: first}
	client := &http.Client{Timeout: 30 * time.Second}
	go func() {
		defer close(tr.done)
		for {
			tr.mu.Lock()
			due := !time.Now().Before(tr.next)
			tr.mu.Unlock()
			if !due {
				select {
				case <-ctx.Done():
					return
				case <-time.After(20 * time.Millisecond):
				}
				continue
			}
			start := time.Now()
			req, _ := http.NewRequestWithContext(ctx, "POST", p.API+"/api/v1/sandboxes/"+id+"/exec",
				bytes.NewReader([]byte(`{"command":"true"}`)))
			req.Header.Set("Authorization", "Bearer "+p.Token)
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			fail := ""
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				fail = err.Error()
			default:
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					fail = fmt.Sprintf("status %d: %s", resp.StatusCode, b)
				}
			}
			tr.mu.Lock()
			tr.calls++
			tr.last = start
			if tr.next.Before(start.Add(every)) {
				tr.next = start.Add(every)
			}
			if fail != "" {
				tr.fails = append(tr.fails, fmt.Sprintf("exec at %s: %s", start.Format("15:04:05.000"), fail))
			}
			tr.mu.Unlock()
		}
	}()
	return tr
}

// pause waits for the call in flight (or the next one) to complete, holds
// further calls, and returns when that call started.
func (tr *traffic) pause(t *testing.T) time.Time {
	t.Helper()
	tr.mu.Lock()
	n := tr.calls
	tr.mu.Unlock()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		tr.mu.Lock()
		if tr.calls > n {
			tr.next = time.Now().Add(time.Hour)
			last := tr.last
			tr.mu.Unlock()
			return last
		}
		tr.mu.Unlock()
	}
	t.Fatal("no exec completed within a minute")
	return time.Time{}
}

// resume lets calls go on from at.
func (tr *traffic) resume(at time.Time) {
	tr.mu.Lock()
	tr.next = at
	tr.mu.Unlock()
}

// stop ends the traffic and fails t if any call failed or none was made.
func (tr *traffic) stop(t *testing.T, id string) {
	t.Helper()
	tr.cancel()
	<-tr.done
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.calls == 0 {
		t.Errorf("no exec reached %s", id)
	}
	for _, f := range tr.fails {
		t.Errorf("%s: %s", id, f)
	}
}

// TestActivityFaults: lost, unreachable or hung activity data never
// suspends a sandbox in use, serving goes on through the fault, and a truly
// idle sandbox is still suspended about one idle timeout after it.
//
// Each case runs `sbx dev` (SQLite) with a 15 s idle timeout (checked every
// 5 s) and two sandboxes ready for longer than that, so that activity read
// as missing would make both look idle. "idle" gets an exec every 3 s until
// the fault and none after. "busy" gets one every 3 s, except around the
// fault: its last exec before it is flushed to Redis, and its next comes 12
// s after that one, within the idle timeout, leaving the detector several
// checks that see the data as it is after the fault. The Redis cases use a
// private redis-server (never the shared one).
func TestActivityFaults(t *testing.T) {
	const (
		idleTimeout = 15 * time.Second
		every       = 3 * time.Second
		gap         = idleTimeout - every // between busy's execs around the fault
	)
	cases := []struct {
		name  string
		redis bool
		// fault breaks the activity data; it returns the sbx dev to go on
		// with (a new one when it restarts it).
		fault func(t *testing.T, p *devProc, r *redistest.Server, extra []string) *devProc
	}{
		{"redis killed, restarted empty", true, func(t *testing.T, p *devProc, r *redistest.Server, _ []string) *devProc {
			r.Kill()
			time.Sleep(2 * time.Second)
			r.Restart()
			return p
		}},
		{"redis flushed", true, func(t *testing.T, p *devProc, r *redistest.Server, _ []string) *devProc {
			r.FlushAll()
			return p
		}},
		{"redis hung", true, func(t *testing.T, p *devProc, r *redistest.Server, _ []string) *devProc {
			r.Hang()
			time.Sleep(5 * time.Second) // over an idle check
			r.Resume()
			return p
		}},
		{"sbx dev restarted", false, func(t *testing.T, p *devProc, _ *redistest.Server, extra []string) *devProc {
			p.stop() // in-memory activity: the new process knows nothing of it
			return startDev(t, p.DataDir, "", extra...)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			extra := []string{"--idle-timeout", idleTimeout.String()}
			var r *redistest.Server
			if c.redis {
				r = redistest.Start(t)
				extra = append(extra, "--redis-url", r.URL())
			}
			p := startDev(t, t.TempDir(), "", extra...)
			busy, idle := createReady(t, p), createReady(t, p)
			busyTr, idleTr := p.execEvery(busy, every, time.Now()), p.execEvery(idle, every, time.Now())
			p.holdsStatus(busy, "ready", idleTimeout+2*time.Second)
			idleTr.stop(t, idle)

			lastUse := busyTr.pause(t)
			time.Sleep(time.Until(lastUse.Add(1500 * time.Millisecond))) // flushed (every 1 s)
			faultAt := time.Now()
			if next := c.fault(t, p, r, extra); next != p {
				busyTr.stop(t, busy) // its calls went to the old process
				p, busyTr = next, next.execEvery(busy, every, lastUse.Add(gap))
			} else {
				busyTr.resume(lastUse.Add(gap))
			}
			recovered := time.Now()
			t.Logf("fault at %s took %v; busy used at %s and next at %s", faultAt.Format("15:04:05.000"),
				recovered.Sub(faultAt).Round(time.Millisecond), lastUse.Format("15:04:05.000"), lastUse.Add(gap).Format("15:04:05.000"))

			// Busy stays ready throughout; idle is suspended about one
			// idle timeout after the fault.
			deadline := recovered.Add(idleTimeout + 45*time.Second) // a loaded machine works jobs slowly
			for {
				var b, i sbView
				p.call("GET", "/api/v1/sandboxes/"+busy, nil, &b)
				p.call("GET", "/api/v1/sandboxes/"+idle, nil, &i)
				if b.Status != "ready" {
					t.Fatalf("busy sandbox became %s at %s, %v after the fault; it was used within the idle timeout",
						b.Status, time.Now().Format("15:04:05.000"), time.Since(faultAt).Round(time.Millisecond))
				}
				if i.Status == "suspended" {
					t.Logf("idle sandbox suspended %v after the fault", time.Since(faultAt).Round(time.Millisecond))
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("idle sandbox still %s %v after the fault, want suspended", i.Status, time.Since(faultAt))
				}
				time.Sleep(200 * time.Millisecond)
			}
			p.holdsStatus(busy, "ready", 4*time.Second)
			busyTr.stop(t, busy)
		})
	}
}
