package main

import (
	"encoding/json"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sbxedge/sbx/control/apiclient"
)

// newUpdateCmd is PATCH /sandboxes/{id} for the idleness settings a
// create takes; sbx extend is the deadline's own verb.
func newUpdateCmd(a *app) *cobra.Command {
	var idle, retention int
	var keepAwake, wakeOnTraffic bool
	c := &cobra.Command{
		Use:   "update ID|NAME",
		Short: "Change a sandbox's idle timeout, keep-awake and retention settings",
		Long: `Change what sbx create's --idle-timeout, --no-keep-awake and
--retention-days set, on a sandbox that has not ended. Only the flags given
change. --idle-timeout is at most the account's idle timeout; --retention-days
counts from when the sandbox was suspended and is at most the deployment's
maximum lifetime. A value out of range is refused naming the field and the
range, and nothing changes.`,
		Example: `  sbx update my-pr-1234 --idle-timeout 2
  sbx update $ID --keep-awake=false --retention-days 3
  sbx update $ID --wake-on-traffic=false`,
		Args:              args([]string{"ID"}),
		ValidArgsFunction: a.completeSandboxes,
		RunE: func(c *cobra.Command, got []string) error {
			body := map[string]any{}
			if c.Flags().Changed("idle-timeout") {
				body["idle_timeout_minutes"] = idle
			}
			if c.Flags().Changed("keep-awake") {
				body["keep_awake_while_busy"] = keepAwake
			}
			if c.Flags().Changed("retention-days") {
				body["retention_days"] = retention
			}
			if c.Flags().Changed("wake-on-traffic") {
				body["wake_on_traffic"] = wakeOnTraffic
			}
			if len(body) == 0 {
				return usageErrorf(c, "nothing to change: give --idle-timeout, --keep-awake, --retention-days or --wake-on-traffic")
			}
			b, err := json.Marshal(body)
			if err != nil {
				return err
			}
			cl, err := a.api()
			if err != nil {
				return err
			}
			return a.printAnswer(apiclient.Raw(cl.gen.UpdateSandboxWithBodyWithResponse(c.Context(), got[0], "application/json", strings.NewReader(string(b)))))
		},
	}
	c.Flags().IntVar(&idle, "idle-timeout", 0, "minutes without activity before it is suspended (1 to the account's idle timeout)")
	c.Flags().BoolVar(&keepAwake, "keep-awake", true, "whether running work (a nohup build, an exec, CPU use) keeps it awake past its idle timeout")
	c.Flags().IntVar(&retention, "retention-days", 0, "days it may stay suspended before it is deleted")
	c.Flags().BoolVar(&wakeOnTraffic, "wake-on-traffic", true, "whether traffic wakes it while it is stopped")
	return c
}
