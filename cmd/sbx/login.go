package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"
)

func newLoginCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "login",
		Short: "Save an API token (and --api URL) to the config file",
		Long: `Save an account token, and the API URL given with --api, to
~/.config/sbx/config.json (mode 0600). The token is read from stdin: typed
without echo on a terminal, or piped. It is checked against the API first.
SBX_TOKEN and SBX_API, when set, still win over the file.`,
		Example: `  sbx login --api https://sbx.example.com
  sbx login < token.txt
  cat ~/.sbx/dev/token | sbx login --api http://127.0.0.1:8080`,
		Args: args(nil),
		RunE: func(c *cobra.Command, _ []string) error {
			var tok string
			if f, ok := a.in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
				fmt.Fprint(a.errw, "Paste your sbx token (input is hidden): ")
				b, err := term.ReadPassword(int(f.Fd()))
				fmt.Fprintln(a.errw)
				if err != nil {
					return fmt.Errorf("read token: %w", err)
				}
				tok = string(b)
			} else {
				line, err := bufio.NewReader(a.in).ReadString('\n')
				if err != nil && line == "" {
					return errors.New("no token on stdin: pipe it in (sbx login < token.txt) or run sbx login on a terminal")
				}
				tok = line
			}
			tok = strings.TrimSpace(tok)
			if tok == "" {
				return errors.New("empty token")
			}
			cfg, err := readConfig()
			if err != nil {
				return err
			}
			if a.apiFlag != "" {
				cfg.API = strings.TrimRight(a.apiFlag, "/")
			}
			// Check before saving: a typo should fail here, not later.
			base := cfg.API
			if base == "" {
				base = a.apiURL()
			}
			cl := a.newClient(base, tok)
			if _, err := cl.profiles(c.Context()); err != nil {
				return err
			}
			cfg.Token = tok
			if err := writeConfig(cfg); err != nil {
				return err
			}
			fmt.Fprintf(a.errw, "token saved to %s for %s\n", configFile(), cl.base)
			return nil
		},
	}
}

func newLogoutCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "logout",
		Short: "Remove the saved token from the config file",
		Args:  args(nil),
		RunE: func(c *cobra.Command, _ []string) error {
			cfg, err := readConfig()
			if err != nil {
				return err
			}
			if cfg.Token == "" {
				fmt.Fprintln(a.errw, "no token saved")
				return nil
			}
			cfg.Token = ""
			if err := writeConfig(cfg); err != nil {
				return err
			}
			fmt.Fprintf(a.errw, "token removed from %s\n", configFile())
			return nil
		},
	}
}
