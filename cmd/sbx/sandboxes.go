package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbxedge/sbx/control/apiclient"
)

// printAnswer prints the sandbox an API call answered with
// (apiclient.Raw's), or returns the call's error.
func (a *app) printAnswer(b json.RawMessage, err error) error {
	var sb sandbox
	if err := decodeRaw(&sb)(b, err); err != nil {
		return err
	}
	return a.printSandbox(sb)
}

// printSandbox prints one sandbox: its fields (table), the API's JSON, or
// its ID alone (-o id, for $(...) in scripts).
func (a *app) printSandbox(sb sandbox) error {
	switch a.output {
	case "json":
		return printJSON(a.out, sb)
	case "id":
		_, err := fmt.Fprintln(a.out, sb.ID)
		return err
	}
	t := newTable(a.out, "ID", "NAME", "STATUS", "PROFILE", "PLATFORM", "DEADLINE")
	t.row(sb.ID, nameCell(sb), sb.Status, sb.Profile, sb.Platform, deadlineCell(sb))
	return t.flush()
}

func deadlineCell(sb sandbox) string {
	switch sb.Status {
	case "terminating", "terminated", "failed":
		if sb.EndReason != nil {
			return "ended: " + *sb.EndReason
		}
		return "-"
	}
	return localTime(sb.DeadlineAt) + " (" + until(sb.DeadlineAt, time.Now()) + ")"
}

func newCreateCmd(a *app) *cobra.Command {
	var profileName string
	var deadline int
	var wait time.Duration
	var repo repoFlags
	var fromSnapshot, name string
	var labels, envs, secretEnv, secretFile []string
	var idleMinutes, retentionDays int
	var noKeepAwake bool
	var egress egressFlags
	c := &cobra.Command{
		Use:   "create",
		Short: "Create a sandbox and wait until it is ready",
		Long: `Create a sandbox and wait until it is ready, following its event stream
(pending, then ready). On a terminal the states are shown on stderr as they come.

With --repo, the repository is cloned into the workspace before the sandbox
is ready (at --ref, a branch, tag or full commit ID, with --depth commits of
history). A private repository's token is read from $SBX_REPO_TOKEN, or from
the file --repo-token-file names ("-" for stdin), never from a flag's value:
those show in ps and in shell history.

--env NAME=VALUE is set in every process of the sandbox (exec, SSH, terminals,
services). --secret NAME delivers the account secret NAME (sbx secrets set) as
an environment variable, --secret-file NAME as $HOME/.sbx/secrets/NAME (0400).
A sandbox with work running (a process other than its services, or CPU use)
is not suspended for idleness unless --no-keep-awake; --idle-timeout sets its
own (shorter) idle timeout, --retention-days deletes it after that many days
suspended.`,
		Example: `  sbx create
  sbx create --profile tuist-linux-medium --deadline 120
  sbx create --name pr-1234 --label pr=1234   # then: sbx exec pr-1234 -- make test
  sbx create --from-snapshot snap-...   # a fork (also: sbx fork SNAP)
  ID=$(sbx create -o id)
  sbx create --repo https://github.com/tuist/tuist.git --ref main --depth 1
  sbx create --env NODE_ENV=test --secret NPM_TOKEN --idle-timeout 2
  gh auth token | sbx create --repo https://github.com/me/private.git --repo-token-file -
  sbx create --egress allowlist --allow github.com --allow '*.npmjs.org:443'
  sbx create --credential anthropic`,
		Args: args(nil),
		RunE: func(c *cobra.Command, _ []string) error {
			var body apiclient.CreateSandbox
			if profileName != "" {
				body.Profile = &profileName // else the server's default
			}
			if fromSnapshot != "" {
				body.FromSnapshot = &fromSnapshot
			}
			if name != "" {
				body.Name = &name // the server checks its shape and uniqueness
			}
			if len(labels) > 0 {
				m := map[string]string{}
				for _, kv := range labels {
					k, v, ok := strings.Cut(kv, "=")
					if !ok || k == "" {
						return usageErrorf(c, "--label %q: want KEY=VALUE", kv)
					}
					m[k] = v
				}
				body.Labels = &m
			}
			if c.Flags().Changed("deadline") {
				if deadline < 1 {
					return usageErrorf(c, "--deadline %d: want minutes from now, at least 1", deadline)
				}
				body.DeadlineMinutes = &deadline
			}
			if err := egress.apply(c, &body); err != nil {
				return err
			}
			var err error
			if body.Repo, err = repo.source(c, a.in); err != nil {
				return err
			}
			if len(envs) > 0 {
				m := map[string]string{}
				for _, kv := range envs {
					k, v, ok := strings.Cut(kv, "=")
					if !ok || k == "" {
						return usageErrorf(c, "--env %q: want NAME=VALUE", kv)
					}
					m[k] = v
				}
				body.Env = &m
			}
			var refs []apiclient.SecretRef
			for _, n := range secretEnv {
				refs = append(refs, apiclient.SecretRef{Name: n, As: "env"})
			}
			for _, n := range secretFile {
				refs = append(refs, apiclient.SecretRef{Name: n, As: "file"})
			}
			if len(refs) > 0 {
				body.Secrets = &refs
			}
			if c.Flags().Changed("idle-timeout") {
				body.IdleTimeoutMinutes = &idleMinutes
			}
			if c.Flags().Changed("retention-days") {
				body.RetentionDays = &retentionDays
			}
			if noKeepAwake {
				f := false
				body.KeepAwakeWhileBusy = &f
			}
			if wait < 0 {
				return usageErrorf(c, "--wait %s: want a duration of 0 or more", wait)
			}
			cl, err := a.api()
			if err != nil {
				return err
			}
			sb, err := a.createAndWait(c.Context(), cl, body, wait)
			if err != nil {
				return err
			}
			return a.printSandbox(sb)
		},
	}
	c.Flags().StringVar(&profileName, "profile", "", "sandbox profile (default: the server's, marked in sbx profiles)")
	c.Flags().StringVar(&name, "name", "", "a name usable wherever the ID is (a DNS label, unique among your live sandboxes)")
	c.Flags().StringArrayVar(&labels, "label", nil, "a label KEY=VALUE for sbx list --label; repeatable")
	c.Flags().IntVar(&deadline, "deadline", 0, "minutes until the sandbox is ended (default: the server's, 60)")
	c.Flags().DurationVar(&wait, "wait", 2*time.Minute, "how long to wait for ready (0: return at once, pending)")
	c.Flags().StringVar(&fromSnapshot, "from-snapshot", "", "fork: start the workspace as this snapshot (snap-...; see sbx snapshots)")
	c.Flags().StringArrayVar(&envs, "env", nil, "NAME=VALUE set in every process of the sandbox; repeatable")
	c.Flags().StringArrayVar(&secretEnv, "secret", nil, "account secret delivered as an environment variable of its name; repeatable")
	c.Flags().StringArrayVar(&secretFile, "secret-file", nil, "account secret delivered as $HOME/.sbx/secrets/NAME; repeatable")
	c.Flags().IntVar(&idleMinutes, "idle-timeout", 0, "minutes without activity before it is suspended (at most the account's)")
	c.Flags().IntVar(&retentionDays, "retention-days", 0, "days it may stay suspended before it is deleted")
	c.Flags().BoolVar(&noKeepAwake, "no-keep-awake", false, "suspend it when idle even while work runs in it")
	repo.register(c)
	egress.register(c)
	_ = c.RegisterFlagCompletionFunc("profile", a.completeProfiles)
	return c
}

// waitReady follows the event stream until the sandbox is ready (or
// ends), showing each state, then returns it as GET shows it.
func (a *app) waitReady(ctx context.Context, c *apiClient, id string, limit time.Duration) (sandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	p := a.newProgress("creating " + id + ": pending")
	last := "pending"
	why := "" // the message of the last state's event
	trail := "pending"
	err := followEvents(ctx, c, id, 0, func(ev event) bool {
		if ev.Type == "repo_clone" && ev.Reason != nil && *ev.Reason == "started" {
			trail += " (cloning)"
			p.set("creating %s: %s", id, trail)
		}
		if ev.State != nil && *ev.State != last {
			last = *ev.State
			why = ""
			if ev.Message != nil {
				why = ": " + *ev.Message // a failed clone's git error
			}
			trail += " → " + last
			p.set("creating %s: %s", id, trail)
		}
		return last != "pending" && last != ""
	})
	var sb sandbox
	if err == nil && ctx.Err() == nil {
		sb, err = c.sandbox(ctx, id)
	}
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		// Ctrl-C stops the waiting, not the sandbox: without its ID the
		// person would not know one is left running (and billed).
		p.Stop("")
		return sb, &interruptedError{msg: fmt.Sprintf("interrupted; sandbox %s was created and is still %s: `sbx get %s` shows it, `sbx destroy %s` removes it", id, last, id, id)}
	case ctx.Err() != nil:
		p.Stop("")
		return sb, fmt.Errorf("sandbox %s still %s after %s; `sbx events --follow %s` shows what it does", id, last, limit, id)
	case err != nil:
		p.Stop("")
		return sb, err
	case sb.Status != "ready":
		p.Stop("")
		reason := ""
		if sb.EndReason != nil {
			reason = " (" + *sb.EndReason + ")"
		}
		return sb, fmt.Errorf("sandbox %s is %s%s%s; `sbx events %s` says more", id, sb.Status, reason, why, id)
	}
	p.Stop("created " + id + ": " + trail)
	return sb, nil
}

// createAndWait creates a sandbox from body and, when wait is positive,
// waits up to wait for it to be ready.
func (a *app) createAndWait(ctx context.Context, cl *apiClient, body apiclient.CreateSandbox, wait time.Duration) (sandbox, error) {
	// A key of this invocation's own: the client sends the create again
	// while control's database blinks (503 store_unavailable), and one
	// whose answer was lost must not make a second sandbox.
	key := "sbx-cli-" + rand.Text()
	var sb sandbox
	if err := decodeRaw(&sb)(apiclient.Raw(cl.gen.CreateSandboxWithResponse(ctx, &apiclient.CreateSandboxParams{IdempotencyKey: &key}, body))); err != nil {
		return sb, err
	}
	if wait > 0 {
		return a.waitReady(ctx, cl, sb.ID, wait)
	}
	return sb, nil
}

func newListCmd(a *app) *cobra.Command {
	var all bool
	var labels []string
	c := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List your sandboxes",
		Example: "  sbx list\n  sbx list --all -o json\n  sbx list --label pr=1234",
		Args:    args(nil),
		RunE: a.withAPI(func(c *cobra.Command, cl *apiClient, _ []string) error {
			for _, kv := range labels {
				if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
					return usageErrorf(c, "--label %q: want KEY=VALUE", kv)
				}
			}
			list, err := cl.sandboxes(c.Context(), !all, labels...)
			if err != nil {
				return err
			}
			switch a.output {
			case "json":
				return printJSON(a.out, list)
			case "id":
				for _, sb := range list {
					fmt.Fprintln(a.out, sb.ID)
				}
				return nil
			}
			t := newTable(a.out, "ID", "NAME", "STATUS", "PROFILE", "PLATFORM", "CREATED", "DEADLINE", "LABELS")
			for _, sb := range list {
				t.row(sb.ID, nameCell(sb), sb.Status, sb.Profile, sb.Platform, localTime(sb.CreatedAt), deadlineCell(sb), labelsCell(sb))
			}
			return t.flush()
		}),
	}
	c.Flags().BoolVarP(&all, "all", "a", false, "include ended sandboxes (terminated, failed)")
	c.Flags().StringArrayVar(&labels, "label", nil, "only sandboxes with this label KEY=VALUE; repeat to require several")
	return c
}

func newGetCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:               "get ID",
		Short:             "Show one sandbox",
		Example:           "  sbx get sbx-k7q2xw9m4t8r1p6zab3cdefghi\n  sbx get $ID -o json",
		Args:              args([]string{"ID"}),
		ValidArgsFunction: a.completeSandboxes,
		RunE: a.withAPI(func(c *cobra.Command, cl *apiClient, got []string) error {
			sb, err := cl.sandbox(c.Context(), got[0])
			if err != nil {
				return err
			}
			return a.printSandbox(sb)
		}),
	}
}

func newDestroyCmd(a *app) *cobra.Command {
	var withSnaps bool
	c := &cobra.Command{
		Use:     "destroy ID",
		Aliases: []string{"rm", "delete"},
		Short:   "Destroy a sandbox (its workspace is deleted)",
		Long: `Destroy a sandbox: its workspace is deleted and billing stops. Its
snapshots are kept (they are the account's, billed as storage until deleted
with sbx snapshots --rm SNAP, and forkable) unless --delete-snapshots.`,
		Example:           "  sbx destroy $ID\n  sbx destroy my-pr-1234 --delete-snapshots",
		Args:              args([]string{"ID"}),
		ValidArgsFunction: a.completeSandboxes,
		RunE: a.withAPI(func(c *cobra.Command, cl *apiClient, got []string) error {
			params := &apiclient.DeleteSandboxParams{}
			if withSnaps {
				params.DeleteSnapshots = &withSnaps
			}
			if err := a.printAnswer(apiclient.Raw(cl.gen.DeleteSandboxWithResponse(c.Context(), got[0], params))); err != nil {
				return err
			}
			// Its sbx ssh-config Host entry would stay in VS Code's list,
			// pointing at nothing.
			_, err := removeSSHEntry(defaultSSHConfigDir(), got[0])
			return err
		}),
	}
	c.Flags().BoolVar(&withSnaps, "delete-snapshots", false, "also delete the sandbox's snapshots (default: they are kept)")
	return c
}

func newExtendCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "extend ID MINUTES",
		Short: "Add MINUTES to a sandbox's deadline",
		Long: `Add MINUTES to a sandbox's current deadline (not to now): extending a
sandbox due in 10 minutes by 45 makes it due in 55. The 7-day cap from
creation still holds.`,
		Example:           "  sbx extend $ID 45",
		Args:              args([]string{"ID", "MINUTES"}),
		ValidArgsFunction: a.completeSandboxes,
		RunE: func(c *cobra.Command, got []string) error {
			minutes, err := strconv.Atoi(got[1])
			if err != nil || minutes < 1 {
				return usageErrorf(c, "MINUTES %q: want a whole number of minutes, at least 1", got[1])
			}
			cl, err := a.api()
			if err != nil {
				return err
			}
			body := strings.NewReader(fmt.Sprintf(`{"extend_minutes":%d}`, minutes))
			return a.printAnswer(apiclient.Raw(cl.gen.UpdateSandboxWithBodyWithResponse(c.Context(), got[0], "application/json", body)))
		},
	}
}

func newProfilesCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "profiles",
		Short:   "List the profiles a sandbox can be created with",
		Example: "  sbx profiles\n  sbx create --profile tuist-linux-medium",
		Args:    args(nil),
		RunE: a.withAPI(func(c *cobra.Command, cl *apiClient, _ []string) error {
			ps, err := cl.profiles(c.Context())
			if err != nil {
				return err
			}
			return a.render(ps, func(w io.Writer) error {
				t := newTable(w, "NAME", "PLATFORM", "CPU", "MEMORY", "DISK", "DEFAULT")
				for _, p := range ps {
					def := ""
					if p.Default {
						def = "yes" // what sbx create without --profile gets
					}
					t.row(p.Name, p.Platform, p.CPU, fmt.Sprintf("%d MiB", p.MemoryMB), fmt.Sprintf("%d GiB", p.DiskGB), def)
				}
				return t.flush()
			})
		}),
	}
}

func newUsageCmd(a *app) *cobra.Command {
	var id string
	c := &cobra.Command{
		Use:   "usage",
		Short: "Billable time: this month by platform, or each ledger line of one sandbox",
		Long: `Billable time from the ledger. Without --sandbox: compute and storage seconds
this calendar month (UTC) by platform, and the monthly soft cap if the account
has one. With --sandbox ID: every ledger line of that sandbox, a compute
interval while it was ready or a storage interval while suspended, with the
reason each one closed.`,
		Example: "  sbx usage\n  sbx usage --sandbox $ID",
		Args:    args(nil),
		RunE: a.withAPI(func(c *cobra.Command, cl *apiClient, _ []string) error {
			if id != "" {
				return a.sandboxUsage(c.Context(), cl, id)
			}
			var u struct {
				From      time.Time `json:"from"`
				To        time.Time `json:"to"`
				Compute   float64   `json:"compute_seconds"`
				Storage   float64   `json:"storage_seconds"`
				Platforms []struct {
					Platform string  `json:"platform"`
					Compute  float64 `json:"compute_seconds"`
					Storage  float64 `json:"storage_seconds"`
				} `json:"platforms"`
				SoftCap *struct {
					MonthlyMinutes int     `json:"monthly_minutes"`
					UsedMinutes    float64 `json:"used_minutes"`
					Exceeded       bool    `json:"exceeded"`
				} `json:"soft_cap"`
			}
			b, err := apiclient.Raw(cl.gen.GetUsageWithResponse(c.Context(), nil))
			return a.renderAnswer(b, err, &u, func(w io.Writer) error {
				fmt.Fprintf(w, "From %s to %s\n\n", localTime(u.From), localTime(u.To))
				t := newTable(w, "PLATFORM", "COMPUTE", "STORAGE")
				for _, p := range u.Platforms {
					t.row(p.Platform, seconds(p.Compute), seconds(p.Storage))
				}
				t.row("total", seconds(u.Compute), seconds(u.Storage))
				if err := t.flush(); err != nil {
					return err
				}
				if u.SoftCap != nil {
					fmt.Fprintf(w, "\nMonthly soft cap: %.0f of %d minutes used", u.SoftCap.UsedMinutes, u.SoftCap.MonthlyMinutes)
					if u.SoftCap.Exceeded {
						fmt.Fprint(w, " (exceeded)")
					}
					fmt.Fprintln(w)
				}
				return nil
			})
		}),
	}
	c.Flags().StringVar(&id, "sandbox", "", "show each ledger line of this sandbox")
	_ = c.RegisterFlagCompletionFunc("sandbox", a.completeSandboxes)
	return c
}

func (a *app) sandboxUsage(ctx context.Context, cl *apiClient, id string) error {
	var u apiclient.SandboxUsage
	b, err := apiclient.Raw(cl.gen.GetSandboxUsageWithResponse(ctx, id))
	return a.renderAnswer(b, err, &u, func(w io.Writer) error {
		t := newTable(w, "KIND", "PLATFORM", "STARTED", "ENDED", "DURATION", "REASON")
		for _, l := range u.Lines {
			reason, ended := l.EndReason, optTime(l.EndedAt)
			if l.EndedAt == nil {
				reason, ended = "(open)", "-"
			}
			t.row(string(l.Kind), l.Platform, localTime(l.StartedAt), ended, seconds(l.Seconds), reason)
		}
		if err := t.flush(); err != nil {
			return err
		}
		fmt.Fprintf(w, "\ncompute %s, storage %s\n", seconds(u.ComputeSeconds), seconds(u.StorageSeconds))
		return nil
	})
}

// seconds renders a duration in seconds for people: 42s, 1h2m3s.
func seconds(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(time.Second).String()
}
