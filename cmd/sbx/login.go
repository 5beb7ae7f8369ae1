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
		Short: "Save an API token for one API to the config file",
		Long: `Save an account token for the API in use (--api, SBX_API, the config
file's, or http://127.0.0.1:8080) to ~/.config/sbx/config.json (mode 0600).
The token is read from stdin: typed without echo on a terminal, or piped. It
is checked against the API first. Each API keeps its own token, and a token
is only ever sent to the API it was saved for; --api also makes that API the
default. SBX_TOKEN, when set, is used instead, with whatever API is named.`,
		Example: `  sbx login --api https://sbx.example.com
  sbx login --api https://staging.sbx.example.com < token.txt
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
			base := a.apiURL()
			key, ok := apiKey(base)
			if !ok {
				return fmt.Errorf("the API URL %q is not an http:// or https:// URL with a host", redactedURL(base))
			}
			// Check before saving: a typo should fail here, not later.
			cl := a.newClient(key, tok)
			if _, err := cl.profiles(c.Context()); err != nil {
				return err
			}
			cfg, err := readConfig()
			if err != nil {
				return err
			}
			if cfg.Tokens == nil {
				cfg.Tokens = map[string]string{}
			}
			cfg.Tokens[key] = tok
			if a.apiFlag != "" {
				cfg.API = key
			}
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
		Short: "Remove the token saved for the API in use from the config file",
		Long: `Remove the token saved for the API in use (--api, SBX_API, the config
file's, or http://127.0.0.1:8080). Tokens saved for other APIs stay.`,
		Example: "  sbx logout --api https://staging.sbx.example.com",
		Args:    args(nil),
		RunE: func(c *cobra.Command, _ []string) error {
			cfg, err := readConfig()
			if err != nil {
				return err
			}
			key, ok := apiKey(a.apiURL())
			if !ok || cfg.Tokens[key] == "" {
				fmt.Fprintf(a.errw, "no token saved for %s\n", redactedURL(a.apiURL()))
				return nil
			}
			delete(cfg.Tokens, key)
			if err := writeConfig(cfg); err != nil {
				return err
			}
			fmt.Fprintf(a.errw, "token for %s removed from %s\n", key, configFile())
			return nil
		},
	}
}
