package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sbxedge/sbx/activity/redisstore"
	"github.com/sbxedge/sbx/control/lifecycle"
)

// faultResult is one row of the fault table.
type faultResult struct {
	name         string
	skipped      string
	lost         int // kept sandboxes no longer ready and usable
	suspended    int // kept sandboxes suspended (wrongly: they were in use)
	ledger       int // ledger rows that differ from the sandboxes' stories
	kept         int // connections still open after their revocation
	flows        int // flows whose authority was not revoked
	interrupted  int // of those, how many failed a round trip
	othersFailed int // failed round trips of flows off the faulted edge
	reconnectMax time.Duration
	stillDown    []string // flows not flowing again
	revokeClosed time.Duration
	activityLag  time.Duration // edge kill: last round trip before the kill minus the last activity Redis holds
	takeover     string        // control kill: whether the other control finished the provisioning
	notes        []string
}

// fault injects one failure while w's flows run. It returns when the
// fault has ended (the failed part is back, or was not coming back), the
// index of the edge its clients were on (-1: none), and notes.
type fault func(ctx context.Context, f *fleet, w *workload, r *faultResult) (end time.Time, edge int, err error)

// scenario runs fault under a fresh workload and measures it; grace is
// how long after the fault's end a revoked connection may still be open.
func (f *fleet) scenario(ctx context.Context, ap *apps, name string, grace time.Duration, fn fault) faultResult {
	r := faultResult{name: name}
	w, err := f.setUp(ctx, ap)
	if err != nil {
		r.skipped = "set-up: " + err.Error()
		return r
	}
	defer f.tearDown(ctx, w)
	if err := w.set.waitFlowing(ctx, time.Now(), 30*time.Second); err != nil {
		r.skipped = "flows never started: " + err.Error()
		return r
	}
	for _, fl := range w.set.flows {
		fl.resetCounters()
	}
	sleepCtx(ctx, time.Second) // traffic before the fault
	end, edge, err := fn(ctx, f, w, &r)
	if err != nil {
		r.notes = append(r.notes, err.Error())
	}
	if err := w.set.waitFlowing(ctx, end, 30*time.Second); err != nil {
		r.notes = append(r.notes, err.Error())
	}
	sleepCtx(ctx, time.Until(end.Add(grace)))
	for _, fl := range w.set.flows {
		st := fl.stats()
		if !st.revoked.IsZero() {
			if !st.ended {
				r.kept++
				r.notes = append(r.notes, fmt.Sprintf("%s still open %v after its revocation", st.name, time.Since(st.revoked).Round(time.Millisecond)))
			} else {
				r.revokeClosed = max(r.revokeClosed, st.endedAt.Sub(st.revoked))
			}
			continue
		}
		r.flows++
		if st.fail > 0 {
			r.interrupted++
		}
		if fl.homeEdge != edge || edge < 0 {
			r.othersFailed += st.fail
		}
		for _, o := range st.outages {
			r.reconnectMax = max(r.reconnectMax, o.end.Sub(o.start))
		}
		if !st.down.IsZero() {
			r.stillDown = append(r.stillDown, st.name)
		}
	}
	w.set.stop()
	var notes []string
	r.lost, r.suspended, notes = w.lost(ctx)
	r.notes = append(r.notes, notes...)
	r.ledger, notes = f.ledgerDiffs(ctx)
	r.notes = append(r.notes, notes...)
	return r
}

// tearDown stops the flows and deletes the workload's sandboxes.
func (f *fleet) tearDown(ctx context.Context, w *workload) {
	w.set.stop()
	for _, id := range w.sandboxes {
		_, _ = f.api(ctx, f.apiLB.addr(), "DELETE", "/api/v1/sandboxes/"+id, nil, nil)
	}
	for _, id := range w.sandboxes {
		_, _ = f.waitStatus(ctx, id, "terminated", 30*time.Second)
	}
}

// killEdge is kill -9 of the edge the first sandbox's clients are on;
// the revocations are made at once, while it is down; it is restarted
// once the scenario is measured (by restartEdge).
func killEdge(ctx context.Context, f *fleet, w *workload, r *faultResult) (time.Time, int, error) {
	e := f.edges[0]
	var lastOK time.Time
	for _, fl := range w.set.flows {
		if fl.homeEdge == 0 {
			if st := fl.stats(); st.lastOK.After(lastOK) {
				lastOK = st.lastOK
			}
		}
	}
	e.kill(false)
	t0 := time.Now()
	if seen, err := f.lastActivity(ctx, w.sandboxes[0]); err != nil {
		r.notes = append(r.notes, "activity: "+err.Error())
	} else {
		r.activityLag = lastOK.Sub(seen)
	}
	err := w.revoke(ctx, 30*time.Second)
	return t0, 0, err
}

// lastActivity is the sandbox's last activity as control's idle detector
// reads it from Redis.
func (f *fleet) lastActivity(ctx context.Context, id string) (time.Time, error) {
	rdb, err := redisstore.NewClient(f.redis.url())
	if err != nil {
		return time.Time{}, err
	}
	defer rdb.Close()
	st, err := redisstore.New(redisstore.Config{Client: rdb})
	if err != nil {
		return time.Time{}, err
	}
	defer st.Close() // before rdb's Close, deferred earlier
	m, err := st.Status(ctx, []string{id})
	if err != nil {
		return time.Time{}, err
	}
	return m[id].LastSeen, nil
}

// killControl is kill -9 of control A while it holds a provisioning job
// (a create sent to it; the job caught running with A as its worker),
// and waits up to takeover for control B to finish that sandbox.
func killControl(takeover time.Duration) fault {
	return func(ctx context.Context, f *fleet, w *workload, r *faultResult) (time.Time, int, error) {
		a := f.controls[0]
		conn, err := pgx.Connect(ctx, f.pg.url)
		if err != nil {
			return time.Now(), -1, err
		}
		defer conn.Close(context.Background())
		var caught string
		var t0 time.Time
		for try := 0; try < 20 && caught == ""; try++ {
			id, err := f.createSandbox(ctx, a.api)
			if err != nil {
				return time.Now(), -1, err
			}
			for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
				// The job must be A's and its sandbox still pending: a
				// job River has not yet marked completed may be done.
				var state, by, sbState string
				err := conn.QueryRow(ctx, `SELECT j.state::text, coalesce(j.attempted_by[array_length(j.attempted_by, 1)], ''), s.state
					FROM river_job j JOIN sandboxes s ON s.id = j.args->>'sandbox_id'
					WHERE j.kind = $1 AND j.args->>'sandbox_id' = $2`, lifecycle.ProvisionArgs{}.Kind(), id).Scan(&state, &by, &sbState)
				if err == nil && state == "running" && by == a.instance && sbState == "pending" {
					// A may commit the sandbox ready between that read
					// and a kill; it would then die holding nothing to
					// take over, its sandbox's server gone with it. So A
					// is frozen first and the state read again: still
					// pending, it dies holding the job; already ready, it
					// goes on and this try is given up.
					if err := a.signal(syscall.SIGSTOP); err != nil {
						return time.Now(), -1, err
					}
					if conn.QueryRow(ctx, `SELECT state FROM sandboxes WHERE id = $1`, id).Scan(&sbState) == nil && sbState == "pending" {
						a.kill(false)
						t0, caught = time.Now(), id
						break
					}
					if err := a.signal(syscall.SIGCONT); err != nil {
						return time.Now(), -1, err
					}
					break // another try
				}
				if err == nil && (state == "completed" || sbState != "pending" || (state == "running" && by != a.instance)) {
					break // another try: this one is done, or B has it
				}
			}
			if caught == "" { // not A's, or not caught in time: gone again
				_, _ = f.api(ctx, f.apiLB.addr(), "DELETE", "/api/v1/sandboxes/"+id, nil, nil)
			}
		}
		if caught == "" {
			return time.Now(), -1, fmt.Errorf("no provisioning job of %s caught running in 20 tries", a.instance)
		}
		begun := "not yet begun"
		if _, err := os.Stat(filepath.Join(f.dir, a.instance, "sandboxes", caught)); err == nil {
			begun = "begun in its provider"
		}
		var sbState string
		_ = conn.QueryRow(ctx, `SELECT state FROM sandboxes WHERE id = $1`, caught).Scan(&sbState)
		r.notes = append(r.notes, fmt.Sprintf("killed %s holding the provisioning job of %s (provisioning %s; sandbox %s after the kill)",
			a.instance, caught, begun, sbState))
		err = w.revoke(ctx, 30*time.Second)
		status, werr := f.waitStatus(ctx, caught, "ready", takeover)
		r.takeover = fmt.Sprintf("no: %s after %v (a live control requeues a dead one's running jobs once the dead one's "+
			"instance lock is free, at its next 2 s sweep)", status, takeover)
		if werr == nil {
			r.takeover = fmt.Sprintf("ready %v after the kill", time.Since(t0).Round(time.Millisecond))
			// Ready is not enough: A may have committed it ready as it
			// died, its server gone with it (a local sandbox lives in
			// its control's process).
			if err := (&apiExecConn{f: f, id: caught}).roundTrip(ctx, "taken-over"); err != nil {
				r.lost++
				r.takeover += fmt.Sprintf(", but unusable (%v): its server died with %s", err, a.instance)
			} else {
				r.takeover += " and usable"
			}
			var by string
			_ = conn.QueryRow(ctx, `SELECT coalesce(attempted_by[array_length(attempted_by, 1)], '') FROM river_job WHERE kind = $1 AND args->>'sandbox_id' = $2`,
				lifecycle.ProvisionArgs{}.Kind(), caught).Scan(&by)
			r.takeover += " (job last run by " + by + ")"
		}
		// The sandbox must be ready (taken over) or cleanly failed with
		// no billing line, never half-billed: the ledger check sees it.
		return t0, -1, err
	}
}

// stopRedis is SIGSTOP of Redis for d, then a restart with no data (as a
// Redis without persistence comes back); the revocations are made while
// it is stopped.
func stopRedis(d time.Duration) fault {
	return func(ctx context.Context, f *fleet, w *workload, r *faultResult) (time.Time, int, error) {
		if err := f.redis.signal(syscall.SIGSTOP); err != nil {
			return time.Now(), -1, err
		}
		t0 := time.Now()
		sleepCtx(ctx, min(time.Second, d/2))
		err := w.revoke(ctx, d)
		sleepCtx(ctx, time.Until(t0.Add(d)))
		f.redis.kill(false)
		if uerr := f.redis.up(ctx); uerr != nil {
			return time.Now(), -1, uerr
		}
		r.notes = append(r.notes, fmt.Sprintf("redis stopped %v, restarted empty", d))
		return time.Now(), -1, err
	}
}

// restartPostgres restarts the private Postgres (fast shutdown, down
// for d); the revocations are sent while it is down and retried until a
// control accepts them.
func restartPostgres(d time.Duration) fault {
	return func(ctx context.Context, f *fleet, w *workload, r *faultResult) (time.Time, int, error) {
		if f.pg.private == nil {
			return time.Now(), -1, fmt.Errorf("no private Postgres")
		}
		errc := make(chan error, 1)
		t0 := time.Now()
		go func() { errc <- f.pg.restart(ctx, d) }() // returns once the server answers again
		sleepCtx(ctx, 200*time.Millisecond)
		err := w.revoke(ctx, 60*time.Second)
		if perr := <-errc; perr != nil {
			return time.Now(), -1, perr
		}
		r.notes = append(r.notes, fmt.Sprintf("postgres down %v, back after %v", d, time.Since(t0).Round(time.Millisecond)))
		return time.Now(), -1, err
	}
}

// restartEdge brings back the killed edge on its addresses.
func (f *fleet) restartEdge(ctx context.Context, i int) error {
	e := f.edges[i]
	if e.pid() != 0 {
		return nil
	}
	if err := e.start(); err != nil {
		return err
	}
	return e.waitTCP(ctx, e.ssh, 30*time.Second)
}

// printTable writes the fault table in Markdown.
func printTable(rs []faultResult) string {
	var b strings.Builder
	b.WriteString("| fault | sandboxes lost | wrongly suspended | ledger differences | connections kept after revocation | flows interrupted | failed round trips off the fault | longest reconnect | revoked conns closed within | notes |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		if r.skipped != "" {
			fmt.Fprintf(&b, "| %s | – | – | – | – | – | – | – | – | skipped: %s |\n", r.name, oneLine(r.skipped))
			continue
		}
		notes := slices.Clone(r.notes)
		if r.activityLag != 0 {
			notes = append(notes, fmt.Sprintf("activity in Redis at the kill %v behind the last round trip (flush interval 1 s)", r.activityLag.Round(time.Millisecond)))
		}
		if r.takeover != "" {
			notes = append(notes, "provisioning taken over by the other control: "+r.takeover)
		}
		if len(r.stillDown) > 0 {
			notes = append(notes, "not flowing again: "+strings.Join(r.stillDown, ", "))
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d of %d | %d | %v | %v | %s |\n", r.name, r.lost, r.suspended, r.ledger, r.kept,
			r.interrupted, r.flows, r.othersFailed, r.reconnectMax.Round(time.Millisecond), r.revokeClosed.Round(time.Millisecond),
			oneLine(strings.Join(notes, "; ")))
	}
	return b.String()
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	s = strings.ReplaceAll(s, "|", "/")
	if len(s) > 600 {
		s = s[:600] + "…"
	}
	return s
}
