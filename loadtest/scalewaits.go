package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// waitSampler tallies what control's Postgres backends are doing while a
// step runs, from pg_stat_activity every 20 ms: "Lock:advisory" is a
// create waiting on another's account lock, "IO:WALSync" a commit's
// fsync, "Client:ClientRead" a transaction waiting on control between
// statements, "cpu" running. Only this run's scratch database is read, so
// other users of the server do not show.
type waitSampler struct {
	mu      sync.Mutex
	counts  map[string]int
	samples int
	stop    context.CancelFunc
	done    chan struct{}
}

func startWaitSampler(ctx context.Context, dbURL string) (*waitSampler, error) {
	db, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &waitSampler{counts: map[string]int{}, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer db.Close(context.Background())
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rows, err := db.Query(ctx, `SELECT coalesce(wait_event_type || ':' || wait_event, 'cpu'), state
				FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
				AND backend_type = 'client backend' AND state <> 'idle'`)
			if err != nil {
				continue
			}
			var got []string
			for rows.Next() {
				var ev, state string
				if rows.Scan(&ev, &state) == nil {
					if state == "idle in transaction" {
						ev = "idle in transaction (" + ev + ")"
					}
					got = append(got, ev)
				}
			}
			rows.Close()
			w.mu.Lock()
			w.samples++
			for _, ev := range got {
				w.counts[ev]++
			}
			w.mu.Unlock()
		}
	}()
	return w, nil
}

// finish stops sampling and says, per kind, how many backends were in it
// on average.
func (w *waitSampler) finish() string {
	w.stop()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.samples == 0 {
		return "no wait samples"
	}
	type kv struct {
		k string
		n int
	}
	var all []kv
	for k, n := range w.counts {
		all = append(all, kv{k, n})
	}
	slices.SortFunc(all, func(a, b kv) int { return b.n - a.n })
	var parts []string
	for i, e := range all {
		if i == 6 {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.2f", e.k, float64(e.n)/float64(w.samples)))
	}
	return fmt.Sprintf("Postgres backends busy, mean over %d samples: %s", w.samples, strings.Join(parts, ", "))
}

// loadAvg is the machine's 1-minute load average, as /proc/loadavg says.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}
