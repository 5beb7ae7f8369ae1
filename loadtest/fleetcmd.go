package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

// fleetConfig bounds the fleet fault run.
type fleetConfig struct {
	Scenarios string
	RedisStop time.Duration
	PGDown    time.Duration
	Grace     time.Duration
	Takeover  time.Duration
	Bins      string
	PrivatePG bool
	Timeout   time.Duration
	Keep      bool
	Table     string // also write the table here
}

var fleetScenarios = []string{"edge", "redis", "postgres", "control"}

func (c *fleetConfig) Validate() error {
	var errs []error
	for s := range strings.SplitSeq(c.Scenarios, ",") {
		if !contains(fleetScenarios, s) {
			errs = append(errs, fmt.Errorf("--scenarios: %q is not one of %v", s, fleetScenarios))
		}
	}
	if c.RedisStop < time.Second || c.RedisStop > 5*time.Minute {
		errs = append(errs, errors.New("--redis-stop must be 1s..5m"))
	}
	if c.PGDown < 0 || c.PGDown > time.Minute {
		errs = append(errs, errors.New("--pg-down must be 0..1m"))
	}
	if c.Grace <= 0 || c.Grace > time.Minute {
		errs = append(errs, errors.New("--grace must be (0, 1m]"))
	}
	if c.Takeover <= 0 || c.Takeover > 10*time.Minute {
		errs = append(errs, errors.New("--takeover must be (0, 10m]"))
	}
	if c.Timeout <= 0 || c.Timeout > time.Hour {
		errs = append(errs, errors.New("--timeout must be (0, 1h]"))
	}
	return errors.Join(errs...)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func defaultFleetConfig() fleetConfig {
	return fleetConfig{Scenarios: strings.Join(fleetScenarios, ","), RedisStop: 30 * time.Second, PGDown: 3 * time.Second,
		Grace: 5 * time.Second, Takeover: time.Minute, PrivatePG: true, Timeout: 20 * time.Minute}
}

// runFleet starts the fleet, prints its addresses, runs the fault
// scenarios in order and prints the fault table.
func runFleet(ctx context.Context, args []string) error {
	c := defaultFleetConfig()
	fs := flag.NewFlagSet("loadtest fleet", flag.ContinueOnError)
	fs.StringVar(&c.Scenarios, "scenarios", c.Scenarios, "comma-separated faults, run in this order: edge (kill -9 of an edge), redis (SIGSTOP, then restarted empty), postgres (private cluster restarted), control (kill -9 of the control holding a provisioning job; last, as it leaves one control)")
	fs.DurationVar(&c.RedisStop, "redis-stop", c.RedisStop, "how long Redis stays stopped")
	fs.DurationVar(&c.PGDown, "pg-down", c.PGDown, "how long Postgres stays down between its stop and start")
	fs.DurationVar(&c.Grace, "grace", c.Grace, "how long after a fault ends a revoked connection may still be open")
	fs.DurationVar(&c.Takeover, "takeover", c.Takeover, "how long the surviving control is given to finish the killed one's provisioning")
	fs.StringVar(&c.Bins, "bins", "", "folder holding control and edge binaries (empty: go build them)")
	fs.BoolVar(&c.PrivatePG, "private-postgres", c.PrivatePG, "run a private PostgreSQL cluster (needed for the postgres fault); false: a fresh database on 127.0.0.1:5432")
	fs.DurationVar(&c.Timeout, "timeout", c.Timeout, "bound on the whole run")
	fs.BoolVar(&c.Keep, "keep", false, "keep the fleet's folder (logs) after the run")
	fs.StringVar(&c.Table, "table", "", "also write the Markdown table to this file")
	if err := parseConfig(fs, args, &c); err != nil {
		return err
	}
	table, err := fleetRun(ctx, c, os.Stdout)
	if table != "" {
		fmt.Print("\n" + table)
		if c.Table != "" {
			_ = os.WriteFile(c.Table, []byte(table), 0o644)
		}
	}
	return err
}

// fleetRun is runFleet without the flags: the test calls it too. It
// returns the table, and an error if the fleet could not run.
func fleetRun(ctx context.Context, c fleetConfig, out *os.File) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	dir, err := os.MkdirTemp("", "sbx-fleet-")
	if err != nil {
		return "", err
	}
	if c.Keep {
		fmt.Fprintf(out, "keeping %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	start := time.Now()
	f, err := startFleet(ctx, dir, c.Bins, c.PrivatePG)
	if err != nil {
		return "", err
	}
	defer f.close()
	fmt.Fprintf(out, "fleet up in %v\n", time.Since(start).Round(time.Millisecond))
	f.printAddrs(out)
	ap, err := startApps()
	if err != nil {
		return "", err
	}
	defer ap.close()
	var rs []faultResult
	for s := range strings.SplitSeq(c.Scenarios, ",") {
		t := time.Now()
		var r faultResult
		switch s {
		case "edge":
			r = f.scenario(ctx, ap, "kill -9 of an edge (edge-1)", c.Grace, killEdge)
			if err := f.restartEdge(ctx, 0); err != nil {
				return printTable(append(rs, r)), err
			}
		case "redis":
			r = f.scenario(ctx, ap, fmt.Sprintf("Redis SIGSTOP %v, restarted empty", c.RedisStop), c.Grace, stopRedis(c.RedisStop))
		case "postgres":
			if f.pg.private == nil {
				r = faultResult{name: "Postgres restart", skipped: "no private cluster (" + f.pgNote + "); the shared server is never restarted"}
			} else {
				r = f.scenario(ctx, ap, fmt.Sprintf("Postgres restart (down %v)", c.PGDown), c.Grace, restartPostgres(c.PGDown))
			}
		case "control":
			r = f.scenario(ctx, ap, "kill -9 of the control holding a provisioning job", c.Grace, killControl(c.Takeover))
		}
		fmt.Fprintf(out, "%s: done in %v\n", r.name, time.Since(t).Round(time.Millisecond))
		rs = append(rs, r)
		if ctx.Err() != nil {
			break
		}
	}
	return printTable(rs), ctx.Err()
}
