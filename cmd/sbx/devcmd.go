package main

import (
	"errors"
	"flag"

	"github.com/spf13/cobra"
)

// newDevCmd wraps runDev (dev.go), which parses its own flags: the dev
// stack's wiring and flags stay in one place, and --help there prints
// every flag with its default.
func newDevCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "dev [flags]",
		Short: "Run control, the SSH broker, previews and local sandboxes in one process",
		Long: `Run the whole stack in one process: the REST API, the SSH broker, the preview
proxy and local sandboxes, on loopback, with SQLite in --data-dir (or Postgres
and Redis when their URLs are given). sbx dev --help lists every flag.`,
		Example:            "  sbx dev\n  sbx dev --data-dir /tmp/sbx --idle-timeout 10s",
		DisableFlagParsing: true,
		RunE: func(c *cobra.Command, got []string) error {
			return stdFlagResult(c, runDev(c.Context(), got))
		},
	}
}

// newAdminCmd wraps runAdmin (admin.go), which has its own noun-verb
// parser and works on the database directly.
func newAdminCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "admin [--database-url URL | --data-dir DIR] NOUN VERB [flags] [ARGS]",
		Short: "Manage accounts, projects and tokens on the control database",
		Long:  adminUsage,
		Example: `  sbx admin account create --name Hive --limit 3 acct-hive
  sbx admin token mint --account acct-dev --name ci`,
		DisableFlagParsing: true,
		RunE: func(c *cobra.Command, got []string) error {
			return stdFlagResult(c, runAdmin(c.Context(), got, a.out))
		},
	}
}

// stdFlagResult maps the flag package's outcomes: -h/--help is success
// (it printed the usage), a parse error is a usage error.
func stdFlagResult(c *cobra.Command, err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	var ue *usageError
	if err != nil && errors.As(err, &ue) {
		return err
	}
	return err
}
