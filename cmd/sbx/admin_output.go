package main

import (
	"fmt"
	"strings"

	"github.com/sbxedge/sbx/control/store"
)

// takeOutput removes -o/--output and its value from args (before any
// "--"), wherever it sits: sbx admin parses its own flags, and the global
// -o json every other command takes would otherwise be an unknown flag or
// a stray argument.
func takeOutput(args []string) (rest []string, output string, err error) {
	output = "table"
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(rest, args[i:]...), output, nil
		}
		name, val, hasVal := strings.Cut(a, "=")
		if name != "-o" && name != "--output" && name != "-output" {
			rest = append(rest, a)
			continue
		}
		if !hasVal {
			if i+1 >= len(args) {
				return nil, "", adminUsageErr(name + " needs a value: table or json")
			}
			i++
			val = args[i]
		}
		output = val
	}
	if output != "table" && output != "json" {
		return nil, "", adminUsageErr(fmt.Sprintf("--output %q: want table or json", output))
	}
	return rest, output, nil
}

// accountJSON is an account as sbx admin -o json prints it, with the
// names the README and `account show` use.
type accountJSON struct {
	ID              string   `json:"id"`
	Name            string   `json:"name"`
	Enabled         bool     `json:"sandboxes_enabled"`
	ConcurrentLimit int      `json:"sandbox_concurrent_limit"`
	Platforms       []string `json:"platforms"`
	MonthlyMinutes  int      `json:"sandbox_monthly_minutes"`
	// SnapshotLimit is 0 when the account takes the deployment's default.
	SnapshotLimit int `json:"snapshot_limit"`
}

func toAccountJSON(a store.Account) accountJSON {
	p := a.AllowedPlatforms
	if p == nil {
		p = []string{}
	}
	return accountJSON{ID: a.ID, Name: a.Name, Enabled: a.SandboxesEnabled, ConcurrentLimit: a.ConcurrentLimit, Platforms: p, MonthlyMinutes: a.MonthlyMinutes, SnapshotLimit: a.SnapshotLimit}
}
