package main

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// completeSandboxes offers the IDs of live sandboxes for the first
// argument. Completion must never hang a shell: its requests share
// one short timeout.
func (a *app) completeSandboxes(c *cobra.Command, got []string, prefix string) ([]string, cobra.ShellCompDirective) {
	if len(got) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	cl, err := a.api()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	list, err := cl.sandboxes(ctx, true)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var ids []string
	for _, sb := range list {
		if strings.HasPrefix(sb.ID, prefix) {
			ids = append(ids, sb.ID+"\t"+sb.Status+" "+sb.Profile)
		}
	}
	return ids, cobra.ShellCompDirectiveNoFileComp
}

func (a *app) completeProfiles(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	cl, err := a.api()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ps, err := cl.profiles(ctx)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name + "\t" + p.Platform
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}
