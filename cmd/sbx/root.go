package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// version is set at build time: go build -ldflags "-X main.version=v1.2.3".
var version = "dev"

const exitCodesHelp = `Exit codes (the same for every command):
  0    success
  1    the request failed (the API refused it, a sandbox ended, a timeout waiting for it)
  2    usage: an unknown command or flag, a missing or extra argument
  3    the API cannot be reached or did not answer in time
  4    authentication: no token, or the API refused it (401/403)
  5    not found (404): no such sandbox, file or port for this account
  124  sbx exec: the command outlived --timeout and was killed (the API's timed_out)
  130  interrupted (Ctrl-C, SIGINT or SIGTERM)
  Otherwise sbx exec and sbx ssh exit with the remote command's status.
  With -o json a failure is also a JSON problem object on stderr
  ({"type","title","status","code","detail","exit_code"}).`

// newRootCmd builds the command tree. Each command group lives in its own
// file and is added here, in help order.
func newRootCmd(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "sbx",
		Short: "Cloud development sandboxes: create, drive and destroy them, or run the whole stack locally",
		Long: `sbx drives sandboxes through the REST API, and runs the whole stack on a laptop (sbx dev).

The API commands find the API in --api, SBX_API, the config file written by
sbx login, or http://127.0.0.1:8080; the token in SBX_TOKEN (sent to that
API, whichever it is), else the token sbx login saved for that API, else the
token file of a local sbx dev (~/.sbx/dev/token, or $SBX_DATA_DIR/token) if
it is the API that sbx dev serves. A saved token is never sent to another API.

` + exitCodesHelp,
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
		// No default completion command: ours documents how to install it.
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.SetIn(a.in)
	root.SetOut(a.out)
	root.SetErr(a.errw)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &usageError{cmd: c.CommandPath(), msg: flagErrorText(c, err), beforeFlags: true}
	})
	pf := root.PersistentFlags()
	pf.StringVar(&a.apiFlag, "api", "", "API base URL (default: SBX_API, the config file, or http://127.0.0.1:8080)")
	pf.StringVarP(&a.output, "output", "o", "table", "output format: table, json, or id (sandbox IDs only, for scripts)")
	pf.BoolVar(&a.debug, "debug", false, "log each HTTP request to stderr (credentials redacted)")
	pf.DurationVar(&a.timeout, "api-timeout", 30*time.Second, "how long to wait for the API to start answering a request")
	root.PersistentPreRunE = func(c *cobra.Command, _ []string) error {
		if a.output != "table" && a.output != "json" && a.output != "id" {
			return usageErrorf(c, "--output %q: want table, json or id", a.output)
		}
		return nil
	}

	root.AddGroup(&cobra.Group{ID: "sandbox", Title: "Sandboxes:"}, &cobra.Group{ID: "connect", Title: "Working in a sandbox:"},
		&cobra.Group{ID: "account", Title: "Account:"}, &cobra.Group{ID: "stack", Title: "Running the stack:"})
	for _, c := range []*cobra.Command{
		newCreateCmd(a), newListCmd(a), newGetCmd(a), newExtendCmd(a), newUpdateCmd(a), newStopCmd(a), newStartCmd(a), newSnapshotCmd(a), newSnapshotsCmd(a), newRestoreCmd(a), newForkCmd(a), newRecreateCmd(a), newDestroyCmd(a), newEventsCmd(a), newEgressCmd(a),
	} {
		c.GroupID = "sandbox"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{
		newExecCmd(a), newFilesCmd(a), newSSHCmd(a), newSSHConfigCmd(a), newSSHKeyCmd(a), newPortsCmd(a), newWhoCmd(a), newShareCmd(a), newServicesCmd(a), newWebhooksCmd(a), newMCPCmd(a),
	} {
		c.GroupID = "connect"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{newLoginCmd(a), newLogoutCmd(a), newProfilesCmd(a), newUsageCmd(a), newSecretsCmd(a), newCredentialsCmd(a)} {
		c.GroupID = "account"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{newDevCmd(a), newAdminCmd(a), newScaleTestCmd(a)} {
		c.GroupID = "stack"
		root.AddCommand(c)
	}
	root.AddCommand(newVersionCmd(a), newCompletionCmd(a), newSandboxInitCmd(a))
	for _, c := range root.Commands() {
		c.SuggestFor = append(c.SuggestFor, otherNames[c.Name()]...)
	}
	return root
}

// otherNames are the words people reach for first, from docker, kubectl
// and their own habits, mapped to the command that does it: an unknown
// command suggests by spelling alone, and "logs" is closer to "login"
// than to anything that prints logs.
var otherNames = map[string][]string{
	"services": {"logs", "log"},
	"events":   {"logs", "log"},
	"get":      {"status", "show", "inspect", "describe"},
	"destroy":  {"remove", "kill", "terminate"},
	"exec":     {"run"},
	"ssh":      {"shell", "connect", "attach"},
	"list":     {"ps"},
	"files":    {"cp", "upload", "download"},
	"ports":    {"open", "url", "expose", "preview"},
}

// execute runs the CLI and returns the process exit code.
func execute(ctx context.Context, args []string, in io.Reader, out, errw io.Writer) int {
	a := newApp(in, out, errw)
	root := newRootCmd(a)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ex *exitStatus
	if errors.As(err, &ex) {
		return ex.code
	}
	code, msg := a.explainEnd(ctx, err)
	// Before its flags are parsed (a usage error) a command's -o json is
	// found in args.
	var ue *usageError
	if a.output == "json" || errors.As(err, &ue) && ue.beforeFlags && jsonRequested(args) {
		writeProblem(errw, code, msg, err)
	} else {
		fmt.Fprintln(errw, "sbx: "+msg)
	}
	return code
}

// explainEnd is explain for a command that may have been stopped by a
// signal: whatever failed then (a dial cut short reads as an unreachable
// API) failed because of it, and the exit code says so.
func (a *app) explainEnd(ctx context.Context, err error) (int, string) {
	var ie *interruptedError
	if errors.As(err, &ie) {
		return exitInterrupted, ie.msg
	}
	if ctx.Err() != nil {
		return exitInterrupted, "interrupted"
	}
	return a.explain(err)
}

// interruptedError is a command stopped by a signal that has something
// to say about what it leaves behind (a sandbox created but not waited
// for); any other error after a signal is just "interrupted".
type interruptedError struct{ msg string }

func (e *interruptedError) Error() string { return e.msg }

// exitStatus ends the process with a remote command's status, printing
// nothing more.
type exitStatus struct{ code int }

func (e *exitStatus) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// usageError is a mistake in the command line: exit code 2, with a hint
// pointing at --help.
type usageError struct {
	cmd string
	msg string
	// beforeFlags: the flags did not parse, so -o json, if given, was
	// not read into the app.
	beforeFlags bool
}

func (e *usageError) Error() string {
	return fmt.Sprintf("%s (see '%s --help')", e.msg, e.cmd)
}

// flagErrorText words pflag's errors for people: what a value should
// have been instead of Go's parse error, and where a command's own flags
// go when sbx took them for its own.
func flagErrorText(c *cobra.Command, err error) string {
	msg := err.Error()
	if m := parseErrRE.FindStringSubmatchIndex(msg); m != nil {
		if msg[m[4]:m[5]] == "value out of range" {
			return msg[:m[0]] + ": out of range"
		}
		want := map[string]string{"Int": "a whole number", "Uint": "a whole number", "Float": "a number", "Bool": "true or false"}[msg[m[2]:m[3]]]
		return msg[:m[0]] + ": want " + want
	}
	if i := strings.Index(msg, ": time: "); i >= 0 {
		return msg[:i] + ": want a duration such as 90s, 5m or 1h"
	}
	if rest, ok := strings.CutPrefix(msg, "unknown shorthand flag: '"); ok && rest != "" && rest[0] >= '0' && rest[0] <= '9' {
		return msg + " (a negative number reads as a flag)"
	}
	if (strings.HasPrefix(msg, "unknown shorthand flag") || strings.HasPrefix(msg, "unknown flag")) && strings.Contains(c.Use, "[--]") {
		use := strings.ReplaceAll(strings.TrimSuffix(c.UseLine(), " [flags]"), "[--]", "--")
		return msg + "; the command's own flags go after --: " + use
	}
	return msg
}

// parseErrRE matches the strconv error pflag appends to a bad number or
// boolean.
var parseErrRE = regexp.MustCompile(`: strconv\.Parse(Int|Uint|Float|Bool): parsing "[^"]*": (invalid syntax|value out of range)$`)

func usageErrorf(c *cobra.Command, format string, args ...any) error {
	return &usageError{cmd: c.CommandPath(), msg: fmt.Sprintf(format, args...)}
}

// args builds a cobra.PositionalArgs that wants exactly the named
// arguments, then up to len(optional) more, and names what is missing or
// extra.
func args(required []string, optional ...string) cobra.PositionalArgs {
	return func(c *cobra.Command, got []string) error {
		if len(got) < len(required) {
			return usageErrorf(c, "missing %s", strings.Join(required[len(got):], " and "))
		}
		if max := len(required) + len(optional); len(got) > max {
			// The usage line tells "sbx ports expose ID 8000" what goes
			// where; the help is a command away.
			return usageErrorf(c, "unexpected argument %q: %s", got[max], strings.TrimSuffix(c.UseLine(), " [flags]"))
		}
		// An ID or NAME of "." or ".." would be resolved away in the
		// request's URL and address another resource (PATHs are
		// checked by workspacePath).
		for i, name := range slices.Concat(required, optional)[:len(got)] {
			if (name == "ID" || name == "NAME") && (got[i] == "." || got[i] == "..") {
				return usageErrorf(c, "%s %q names nothing: give the %s itself", name, got[i], map[string]string{"ID": "sandbox's ID", "NAME": "service's name"}[name])
			}
		}
		return nil
	}
}

func newVersionCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the sbx version",
		Args:  args(nil),
		RunE: func(c *cobra.Command, _ []string) error {
			if a.output == "json" {
				return printJSON(a.out, map[string]string{"version": version})
			}
			fmt.Fprintf(a.out, "sbx %s\n", version)
			return nil
		},
	}
}

func newCompletionCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "completion bash|zsh|fish|powershell",
		Short: "Print a shell completion script",
		Long: `Print a shell completion script.

  bash:  source <(sbx completion bash)          (or save it to /etc/bash_completion.d/sbx)
  zsh:   sbx completion zsh > "${fpath[1]}/_sbx"
  fish:  sbx completion fish > ~/.config/fish/completions/sbx.fish`,
		Example:   "  source <(sbx completion bash)",
		ValidArgs: []string{"bash", "zsh", "fish", "powershell"},
		Args: func(c *cobra.Command, got []string) error {
			if err := args([]string{"SHELL"})(c, got); err != nil {
				return err
			}
			if err := cobra.OnlyValidArgs(c, got); err != nil {
				return usageErrorf(c, "%v", err)
			}
			return nil
		},
		RunE: func(c *cobra.Command, got []string) error {
			root := c.Root()
			switch got[0] {
			case "bash":
				return root.GenBashCompletionV2(a.out, true)
			case "zsh":
				return root.GenZshCompletion(a.out)
			case "fish":
				return root.GenFishCompletion(a.out, true)
			default:
				return root.GenPowerShellCompletionWithDesc(a.out)
			}
		},
	}
}

// isTerminal reports whether w is a terminal (for progress and prompts).
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	return ok && termIsTerminal(int(f.Fd()))
}
