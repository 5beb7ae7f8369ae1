package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/sbxedge/sbx/internal/sandboxinit"
)

// sandboxInitCmd is the hidden command by which sbx stands in for
// sbx-init: with --sandbox-server sshd and no sbx-init installed (go run,
// or sbx alone on PATH), a sandbox's sshd runs "sbx sandbox-init ctl
// --socket S" to reach the init that runs the sandbox's services.
const sandboxInitCmd = "sandbox-init"

func newSandboxInitCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   sandboxInitCmd + " ctl [--socket SOCKET]",
		Short: "Relay a local sandbox's sshd to its init, as sbx-init ctl does",
		// Not for people: sshd runs it.
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(c *cobra.Command, got []string) error {
			if len(got) == 0 || got[0] != "ctl" {
				return usageErrorf(c, "want %s ctl [--socket SOCKET]", c.CommandPath())
			}
			if code := sandboxinit.Ctl(c.Context(), c.CommandPath()+" ctl", got[1:], os.Getenv, a.in, a.out, a.errw); code != 0 {
				return &exitStatus{code: code}
			}
			return nil
		},
	}
}

// selfInit is sbx's own stand-in for sbx-init (local.Config.InitFallback),
// nil if the running binary cannot be found.
func selfInit() []string {
	exe, err := os.Executable()
	if err != nil {
		return nil
	}
	return []string{exe, sandboxInitCmd}
}
