package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbxedge/sbx/control/apiclient"
)

func newStopCmd(a *app) *cobra.Command {
	var wait time.Duration
	c := &cobra.Command{
		Use:   "stop ID|NAME",
		Short: "Stop a sandbox: suspend it, keeping its workspace",
		Long: `Stop a sandbox: its workspace is snapshotted and its server released.
Compute billing stops (a smaller storage line runs instead) and its
deadline clock pauses. Files stay; running processes end, and declared
services start again when it comes back. It wakes on the next SSH, exec,
files or preview traffic unless it was created or patched with
"wake_on_traffic": false; ` + "`sbx start`" + ` always brings it back.
Stopping a stopped sandbox is fine.`,
		Example:           "  sbx stop $ID\n  sbx stop my-pr-1234 --wait 0",
		Args:              args([]string{"ID"}),
		ValidArgsFunction: a.completeSandboxes,
		RunE: a.withAPI(func(c *cobra.Command, cl *apiClient, got []string) error {
			var sb sandbox
			if err := decodeRaw(&sb)(apiclient.Raw(cl.gen.SuspendSandboxWithResponse(c.Context(), got[0]))); err != nil {
				return err
			}
			if wait > 0 && sb.Status == "suspending" {
				var err error
				if sb, err = a.waitStatus(c.Context(), cl, sb.ID, "suspended", wait); err != nil {
					return err
				}
			}
			return a.printSandbox(sb)
		}),
	}
	c.Flags().DurationVar(&wait, "wait", 5*time.Minute, "wait this long for the sandbox to be suspended (0: return once it is suspending)")
	return c
}

func newStartCmd(a *app) *cobra.Command {
	var wait time.Duration
	c := &cobra.Command{
		Use:   "start ID|NAME",
		Short: "Start a stopped sandbox and wait until it is ready",
		Long: `Start a stopped (suspended) sandbox: its workspace is restored, its
declared services start again, and compute billing resumes. Works
whatever its wake_on_traffic says. Starting a ready sandbox is fine.`,
		Example:           "  sbx start $ID\n  sbx start my-pr-1234",
		Args:              args([]string{"ID"}),
		ValidArgsFunction: a.completeSandboxes,
		RunE: a.withAPI(func(c *cobra.Command, cl *apiClient, got []string) error {
			ctx, cancel := context.WithTimeout(c.Context(), wait)
			defer cancel()
			for {
				var sb sandbox
				err := decodeRaw(&sb)(apiclient.Raw(cl.gen.ResumeSandboxWithResponse(ctx, got[0])))
				var p *apiclient.ProblemError
				if errors.As(err, &p) && p.Code == "sandbox_waking" {
					// Held past the server's limit: the restore goes on.
					t := time.NewTimer(max(p.RetryAfter, time.Second))
					select {
					case <-ctx.Done():
						t.Stop()
						return fmt.Errorf("sandbox %s still starting after %s; `sbx get %s` shows it", got[0], wait, got[0])
					case <-t.C:
					}
					continue
				}
				if err != nil {
					return err
				}
				return a.printSandbox(sb)
			}
		}),
	}
	c.Flags().DurationVar(&wait, "wait", 5*time.Minute, "wait this long for the sandbox to be ready")
	return c
}

// waitStatus polls the sandbox until it is in want, and fails when it
// ends first or limit passes.
func (a *app) waitStatus(ctx context.Context, cl *apiClient, id, want string, limit time.Duration) (sandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		sb, err := cl.sandbox(ctx, id)
		if err != nil && ctx.Err() == nil {
			return sb, err
		}
		switch {
		case err == nil && sb.Status == want:
			return sb, nil
		case err == nil && (sb.Status == "terminating" || sb.Status == "terminated" || sb.Status == "failed"):
			return sb, fmt.Errorf("sandbox %s is %s, not %s; `sbx events %s` says why", id, sb.Status, want, id)
		}
		select {
		case <-ctx.Done():
			return sb, fmt.Errorf("sandbox %s still %s after %s, not yet %s; `sbx get %s` shows it", id, sb.Status, limit, want, id)
		case <-tick.C:
		}
	}
}

// nameCell is a sandbox's name in a table, "-" for none.
func nameCell(sb sandbox) string {
	if sb.Name == nil || *sb.Name == "" {
		return "-"
	}
	return *sb.Name
}

// labelsCell is a sandbox's labels in a table: k=v,k=v by key, "-" for
// none.
func labelsCell(sb sandbox) string {
	if len(sb.Labels) == 0 {
		return "-"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(sb.Labels)) {
		parts = append(parts, k+"="+sb.Labels[k])
	}
	return strings.Join(parts, ",")
}
