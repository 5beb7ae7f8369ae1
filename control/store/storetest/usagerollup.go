package storetest

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

// testUsageMatchesLedger checks Usage against usage computed here from
// the sessions themselves, over random sessions (seconds to days long,
// some still open) and random windows: sub-hour, across hour and day
// bounds, days long. A store that answers from a rollup (Postgres: whole
// hours from usage_hourly, the edges from the ledger) must agree with
// one pass over the ledger.
func testUsageMatchesLedger(t *testing.T, ctx context.Context, s store.Store) {
	rng := rand.New(rand.NewPCG(27, 33))
	base := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	ms := func(max time.Duration) time.Duration {
		return time.Duration(rng.Int64N(int64(max/time.Millisecond))+1) * time.Millisecond
	}
	type line struct {
		platform   string
		kind       store.SessionKind
		start, end time.Time // end zero: open
	}
	var lines []line
	now := base.Add(72 * time.Hour)
	for i := range 12 {
		sb := sandbox("a", fmt.Sprintf("sb-roll-%d", i), base)
		if i%3 == 0 {
			sb.Platform = "macos"
		}
		insertSandboxes(t, s, sb)
		inTx(t, s, func(tx store.Tx) error {
			for _, kind := range []store.SessionKind{store.SessionCompute, store.SessionStorage} {
				at := base.Add(ms(6 * time.Hour))
				for at.Before(now) {
					if _, err := tx.OpenSession(ctx, session(sb, kind, at)); err != nil {
						return err
					}
					long := 10 * time.Minute
					if rng.IntN(4) == 0 {
						long = 30 * time.Hour
					}
					end := at.Add(ms(long))
					if !end.Before(now) {
						lines = append(lines, line{sb.Platform, kind, at, time.Time{}})
						break
					}
					if _, err := tx.CloseSessions(ctx, sb.ID, kind, end, "test"); err != nil {
						return err
					}
					lines = append(lines, line{sb.Platform, kind, at, end})
					at = end.Add(ms(3 * time.Hour))
				}
			}
			return nil
		})
	}
	want := func(from, to time.Time) map[string]float64 {
		out := map[string]float64{}
		for _, l := range lines {
			end := l.end
			if end.IsZero() {
				end = now
			}
			if lo, hi := maxTime(l.start, from), minTime(end, to); hi.After(lo) {
				out[l.platform+"/"+string(l.kind)] += hi.Sub(lo).Seconds()
			}
		}
		return out
	}
	windows := [][2]time.Time{
		{base, now}, {base, now.Add(time.Hour)}, {base.Add(-time.Hour), base.Add(time.Hour)},
		{base.Add(90 * time.Minute), base.Add(150 * time.Minute)}, // across one hour bound
		{base.Add(61 * time.Minute), base.Add(62 * time.Minute)},  // inside one hour
	}
	for range 25 {
		from := base.Add(ms(70 * time.Hour))
		windows = append(windows, [2]time.Time{from, from.Add(ms(40 * time.Hour))})
	}
	for _, w := range windows {
		got, err := s.Usage(ctx, "a", w[0], w[1], now)
		if err != nil {
			t.Fatalf("Usage %v..%v: %v", w[0], w[1], err)
		}
		exp := want(w[0], w[1])
		seen := map[string]bool{}
		for _, r := range got {
			k := r.Platform + "/" + string(r.Kind)
			seen[k] = true
			if math.Abs(r.Seconds-exp[k]) > 1e-3 {
				t.Errorf("window %v..%v, %s: %.3f s, the ledger says %.3f s", w[0].Format(time.RFC3339Nano), w[1].Format(time.RFC3339Nano), k, r.Seconds, exp[k])
			}
		}
		for k, v := range exp {
			if !seen[k] && v > 1e-3 {
				t.Errorf("window %v..%v, %s: missing, the ledger says %.3f s", w[0], w[1], k, v)
			}
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
