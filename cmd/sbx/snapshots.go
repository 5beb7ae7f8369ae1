package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbxedge/sbx/control/apiclient"
)

// snapshotView is a snapshot as the API answers it.
type snapshotView struct {
	ID        string            `json:"id"`
	SandboxID string            `json:"sandbox_id"`
	Status    string            `json:"status"`
	Platform  string            `json:"platform"`
	Profile   string            `json:"profile"`
	Name      *string           `json:"name"`
	Labels    map[string]string `json:"labels"`
	Reason    *string           `json:"reason"`
	CreatedAt time.Time         `json:"created_at"`
	ReadyAt   *time.Time        `json:"ready_at"`
	DeletedAt *time.Time        `json:"deleted_at"`
}

func snapshotTable(w io.Writer, list ...snapshotView) error {
	t := newTable(w, "ID", "STATUS", "SANDBOX", "NAME", "CREATED")
	for _, s := range list {
		name := "-"
		if s.Name != nil {
			name = *s.Name
		}
		t.row(s.ID, s.Status, s.SandboxID, name, localTime(s.CreatedAt))
	}
	return t.flush()
}

func newSnapshotCmd(a *app) *cobra.Command {
	var name string
	var labels []string
	c := &cobra.Command{
		Use:   "snapshot ID|NAME",
		Short: "Take a snapshot of a sandbox's workspace while it runs",
		Long: `Take a point-in-time copy of a ready sandbox's workspace; the sandbox keeps
running. The snapshot belongs to your account, outlives the sandbox, and is
billed as its own storage line until ` + "`sbx snapshots --rm SNAP`" + ` deletes it.
Roll a sandbox back to it with ` + "`sbx restore`" + `, or start new sandboxes
from it with ` + "`sbx fork`" + `. Prints the snapshot (-o id: its ID alone).`,
		Example:           "  SNAP=$(sbx snapshot $ID --name before-migration -o id)",
		Args:              args([]string{"ID"}),
		ValidArgsFunction: a.completeSandboxes,
		RunE: a.withAPI(func(c *cobra.Command, cl *apiClient, got []string) error {
			body := apiclient.SnapshotRequest{}
			if name != "" {
				body.Name = &name
			}
			if len(labels) > 0 {
				m, err := parseLabels(labels)
				if err != nil {
					return usageErrorf(c, "%v", err)
				}
				body.Labels = &m
			}
			var s snapshotView
			if err := decodeRaw(&s)(apiclient.Raw(cl.gen.CreateSnapshotWithResponse(c.Context(), got[0], body))); err != nil {
				return err
			}
			if s.Status == "failed" {
				why := ""
				if s.Reason != nil {
					why = ": " + *s.Reason
				}
				return fmt.Errorf("snapshot %s of %s failed%s; `sbx events %s` says why", s.ID, got[0], why, got[0])
			}
			return a.printSnapshot(s)
		}),
	}
	c.Flags().StringVar(&name, "name", "", "a name for the snapshot (a DNS label)")
	c.Flags().StringArrayVar(&labels, "label", nil, "a label key=value (repeatable)")
	return c
}

func (a *app) printSnapshot(s snapshotView) error {
	switch a.output {
	case "json":
		return printJSON(a.out, s)
	case "id":
		_, err := fmt.Fprintln(a.out, s.ID)
		return err
	}
	return snapshotTable(a.out, s)
}

func newSnapshotsCmd(a *app) *cobra.Command {
	var rm string
	c := &cobra.Command{
		Use:   "snapshots [ID|NAME]",
		Short: "List snapshots (of one sandbox, or all of your account's), or delete one",
		Long: `List the snapshots of your account that were not deleted, newest first,
those of sandboxes that have ended too; with a sandbox, only its own.
With --rm SNAP, delete that snapshot: its storage line closes.`,
		Example:           "  sbx snapshots\n  sbx snapshots $ID\n  sbx snapshots --rm snap-...",
		Args:              args(nil, "ID"),
		ValidArgsFunction: a.completeSandboxes,
		RunE: a.withAPI(func(c *cobra.Command, cl *apiClient, got []string) error {
			if rm != "" {
				if len(got) > 0 {
					return usageErrorf(c, "--rm takes no sandbox")
				}
				var s snapshotView
				if err := decodeRaw(&s)(apiclient.Raw(cl.gen.DeleteSnapshotWithResponse(c.Context(), rm))); err != nil {
					return err
				}
				return a.printSnapshot(s)
			}
			var out struct {
				Snapshots []snapshotView `json:"snapshots"`
			}
			var b []byte
			var err error
			if len(got) == 1 {
				b, err = apiclient.Raw(cl.gen.ListSandboxSnapshotsWithResponse(c.Context(), got[0]))
			} else {
				b, err = apiclient.Raw(cl.gen.ListSnapshotsWithResponse(c.Context()))
			}
			return a.renderAnswer(b, err, &out, func(w io.Writer) error { return snapshotTable(w, out.Snapshots...) })
		}),
	}
	c.Flags().StringVar(&rm, "rm", "", "delete this snapshot (snap-...)")
	return c
}

func newRestoreCmd(a *app) *cobra.Command {
	var wait time.Duration
	c := &cobra.Command{
		Use:   "restore ID|NAME SNAP",
		Short: "Roll a sandbox back to a snapshot in place",
		Long: `Replace a sandbox's workspace with a snapshot's and wait until it is ready
again. It keeps its ID, name, grants and ports; running processes and
sessions end and declared services start again. The snapshot may be of
another sandbox of yours, one that ended included.`,
		Example:           "  sbx restore $ID $SNAP",
		Args:              args([]string{"ID", "SNAP"}),
		ValidArgsFunction: a.completeSandboxes,
		RunE: a.withAPI(func(c *cobra.Command, cl *apiClient, got []string) error {
			ctx, cancel := context.WithTimeout(c.Context(), wait)
			defer cancel()
			var sb sandbox
			err := decodeRaw(&sb)(apiclient.Raw(cl.gen.RestoreSandboxWithResponse(ctx, got[0], apiclient.RestoreRequest{Snapshot: got[1]})))
			var p *apiclient.ProblemError
			if errors.As(err, &p) && p.Code == "sandbox_waking" {
				// Held past the server's limit: the restore goes on.
				if sb, err = a.waitStatus(ctx, cl, got[0], "ready", wait); err != nil {
					return err
				}
			} else if err != nil {
				return err
			}
			return a.printSandbox(sb)
		}),
	}
	c.Flags().DurationVar(&wait, "wait", 5*time.Minute, "wait this long for the sandbox to be ready again")
	return c
}

func newForkCmd(a *app) *cobra.Command {
	var wait time.Duration
	c := &cobra.Command{
		Use:   "fork SNAP",
		Short: "Create a sandbox from a snapshot and wait until it is ready",
		Long: `Create a new sandbox whose workspace starts as the snapshot's, with the
snapshot's profile, and wait until it is ready (sbx create --from-snapshot
with more flags). Many forks of one snapshot are fine.`,
		Example: "  sbx fork $SNAP\n  A=$(sbx fork $SNAP -o id); B=$(sbx fork $SNAP -o id)",
		Args:    args([]string{"SNAP"}),
		RunE: a.withAPI(func(c *cobra.Command, cl *apiClient, got []string) error {
			sb, err := a.createAndWait(c.Context(), cl, apiclient.CreateSandbox{FromSnapshot: &got[0]}, wait)
			if err != nil {
				return err
			}
			return a.printSandbox(sb)
		}),
	}
	c.Flags().DurationVar(&wait, "wait", 2*time.Minute, "how long to wait for ready (0: return at once, pending)")
	return c
}

func newRecreateCmd(a *app) *cobra.Command {
	var wait time.Duration
	c := &cobra.Command{
		Use:   "recreate ID|NAME",
		Short: "Destroy a sandbox and create it again from its create request",
		Long: `Destroy a sandbox and create its successor from the request that created it:
a new ID, the same name, labels, profile, grants and services, and a fresh
workspace (a repository is cloned again unless it needed a token, which is
never kept). Works on a failed sandbox too. Prints the new sandbox.`,
		Example:           "  sbx recreate my-pr-1234",
		Args:              args([]string{"ID"}),
		ValidArgsFunction: a.completeSandboxes,
		RunE: a.withAPI(func(c *cobra.Command, cl *apiClient, got []string) error {
			var sb sandbox
			if err := decodeRaw(&sb)(apiclient.Raw(cl.gen.RecreateSandboxWithResponse(c.Context(), got[0]))); err != nil {
				return err
			}
			if wait > 0 {
				var err error
				if sb, err = a.waitReady(c.Context(), cl, sb.ID, wait); err != nil {
					return err
				}
			}
			return a.printSandbox(sb)
		}),
	}
	c.Flags().DurationVar(&wait, "wait", 2*time.Minute, "how long to wait for the new sandbox to be ready (0: return at once)")
	return c
}

// parseLabels reads key=value flags; the server checks the keys.
func parseLabels(kvs []string) (map[string]string, error) {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--label %q: want key=value", kv)
		}
		m[k] = v
	}
	return m, nil
}
