// Command agent-loop is the product's coding loop driven the way an agent
// drives it, through sbx's MCP tools with the official MCP Go SDK client:
// create a sandbox with a repository staged, run a failing test, write a
// fix, run the test again, commit and push a branch, destroy the sandbox.
// It prints each step and how long it took.
//
// The fix is given (-fix-path, -fix-from): where a real agent asks a model
// for it, this example reads it from a file, so the loop runs without one.
//
//	SBX_TOKEN=... GIT_TOKEN=... go run ./examples/agent-loop \
//	  -api http://127.0.0.1:8080 -repo https://git.example.com/team/app.git \
//	  -test 'go test ./calc' -fix-path calc/add.go -fix-from ./add.go -branch agent/fix-add
//
// Credentials: SBX_TOKEN is the account's agent token (sent to the API
// only). The git token (-git-token-env, default GIT_TOKEN) is sent twice
// and stored nowhere: as the create's repo.token, which the API uses for
// the clone and forgets, and as the environment of the one exec that
// pushes, where an inline git credential helper reads it. No file in the
// sandbox and no API record holds it; the remote stays the plain URL.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type config struct {
	api, token, repo, ref, test, fixPath, fixFrom, branch, message, gitToken string
}

func main() {
	var c config
	flag.StringVar(&c.api, "api", envOr("SBX_API", "http://127.0.0.1:8080"), "the sbx API (its /mcp endpoint is used)")
	flag.StringVar(&c.repo, "repo", "", "the repository's URL (required)")
	flag.StringVar(&c.ref, "ref", "", "the branch, tag or commit to start from (default: the default branch)")
	flag.StringVar(&c.test, "test", "", "the shell command that runs the failing test (required)")
	flag.StringVar(&c.fixPath, "fix-path", "", "the file the fix replaces, relative to the repository (required)")
	flag.StringVar(&c.fixFrom, "fix-from", "", "a local file holding the fixed content (required)")
	flag.StringVar(&c.branch, "branch", "agent/fix", "the branch to commit to and push")
	flag.StringVar(&c.message, "message", "Fix the failing test", "the commit message")
	tokenEnv := flag.String("git-token-env", "GIT_TOKEN", "the environment variable holding the git token (empty variable: none)")
	flag.Parse()
	c.token = os.Getenv("SBX_TOKEN")
	c.gitToken = os.Getenv(*tokenEnv)
	if c.repo == "" || c.test == "" || c.fixPath == "" || c.fixFrom == "" || c.token == "" {
		fmt.Fprintln(os.Stderr, "agent-loop: -repo, -test, -fix-path, -fix-from and SBX_TOKEN are required")
		flag.Usage()
		os.Exit(2)
	}
	if err := run(context.Background(), c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "agent-loop:", err)
		os.Exit(1)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// bearer sends the agent token with every request to the MCP endpoint.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// run is the loop; every step is printed with its duration.
func run(ctx context.Context, c config, out io.Writer) (err error) {
	fix, err := os.ReadFile(c.fixFrom)
	if err != nil {
		return err
	}
	began := time.Now()
	step := func(name string, f func() error) error {
		t := time.Now()
		err := f()
		status := "ok"
		if err != nil {
			status = "FAILED: " + err.Error()
		}
		fmt.Fprintf(out, "%-28s %7.2fs  %s\n", name, time.Since(t).Seconds(), status)
		return err
	}

	client := mcp.NewClient(&mcp.Implementation{Name: "agent-loop", Version: "1"}, nil)
	var s *mcp.ClientSession
	if err := step("connect", func() (err error) {
		s, err = client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: strings.TrimSuffix(c.api, "/") + "/mcp",
			HTTPClient: &http.Client{Transport: bearer{c.token, http.DefaultTransport}}, DisableStandaloneSSE: true}, nil)
		return err
	}); err != nil {
		return err
	}
	defer s.Close()

	var id string
	repo := map[string]any{"url": c.repo}
	if c.ref != "" {
		repo["ref"] = c.ref
	}
	if c.gitToken != "" {
		repo["token"] = c.gitToken // used for the clone, then forgotten
	}
	if err := step("create sandbox (repo staged)", func() error {
		var sb struct{ ID string }
		if err := call(ctx, s, "create_sandbox", map[string]any{"repo": repo}, &sb); err != nil {
			return err
		}
		id = sb.ID
		return call(ctx, s, "wait_sandbox_ready", map[string]any{"sandbox_id": id}, nil)
	}); err != nil {
		return err
	}
	fmt.Fprintf(out, "%-28s %s\n", "sandbox", id)
	defer func() {
		derr := step("destroy sandbox", func() error {
			return call(context.WithoutCancel(ctx), s, "destroy_sandbox", map[string]any{"sandbox_id": id}, nil)
		})
		err = errors.Join(err, derr)
		fmt.Fprintf(out, "%-28s %7.2fs\n", "total", time.Since(began).Seconds())
	}()

	if err := step("run the test (fails)", func() error {
		r, err := execute(ctx, s, id, c.test, nil)
		if err == nil && r.ExitCode == 0 {
			err = errors.New("the test passes before the fix: nothing to do")
		}
		if err == nil {
			fmt.Fprintf(out, "    %s", indent(r.Stdout+r.Stderr))
		}
		return err
	}); err != nil {
		return err
	}
	if err := step("write the fix", func() error {
		return call(ctx, s, "write_sandbox_file", map[string]any{"sandbox_id": id, "path": c.fixPath, "content": string(fix)}, nil)
	}); err != nil {
		return err
	}
	if err := step("rerun the test (passes)", func() error {
		return mustSucceed(execute(ctx, s, id, c.test, nil))
	}); err != nil {
		return err
	}
	if err := step("commit on "+c.branch, func() error {
		return mustSucceed(execute(ctx, s, id, "git checkout -q -b "+shellQuote(c.branch)+" && git add -A && "+
			"git -c user.name=agent-loop -c user.email=agent-loop@example.invalid commit -q -m "+shellQuote(c.message), nil))
	}); err != nil {
		return err
	}
	return step("push "+c.branch, func() error {
		// The helper reads the token from this exec's environment only;
		// nothing is written to the repository's config or the disk.
		push := `git -c credential.helper= -c 'credential.helper=!f() { echo username=x-access-token; echo "password=$AGENT_GIT_TOKEN"; }; f' ` +
			"push -q origin " + shellQuote(c.branch)
		return mustSucceed(execute(ctx, s, id, push, map[string]string{"AGENT_GIT_TOKEN": c.gitToken}))
	})
}

// execResult is what exec_in_sandbox and wait_exec answer.
type execResult struct {
	ExecID           string `json:"exec_id"`
	Running          bool   `json:"running"`
	ExitCode         *int   `json:"exit_code"`
	Stdout, Stderr   string
	StdoutNextOffset int `json:"stdout_next_offset"`
	StderrNextOffset int `json:"stderr_next_offset"`
}

// done is how a finished command is told: exit code and all its output.
type done struct {
	ExitCode       int
	Stdout, Stderr string
}

// execute runs command, following it with wait_exec while it runs longer
// than a call may wait (the documented flow for long commands).
func execute(ctx context.Context, s *mcp.ClientSession, id, command string, env map[string]string) (done, error) {
	args := map[string]any{"sandbox_id": id, "command": command, "timeout_seconds": 600}
	if len(env) > 0 {
		args["env"] = env
	}
	var r execResult
	if err := call(ctx, s, "exec_in_sandbox", args, &r); err != nil {
		return done{}, err
	}
	d := done{Stdout: r.Stdout, Stderr: r.Stderr}
	for r.Running {
		if err := call(ctx, s, "wait_exec", map[string]any{"exec_id": r.ExecID,
			"stdout_offset": r.StdoutNextOffset, "stderr_offset": r.StderrNextOffset}, &r); err != nil {
			return done{}, err
		}
		d.Stdout += r.Stdout
		d.Stderr += r.Stderr
	}
	if r.ExitCode == nil {
		return done{}, errors.New("the command ended without an exit code (killed)")
	}
	d.ExitCode = *r.ExitCode
	return d, nil
}

func mustSucceed(d done, err error) error {
	if err == nil && d.ExitCode != 0 {
		err = fmt.Errorf("exit %d: %s", d.ExitCode, strings.TrimSpace(d.Stdout+d.Stderr))
	}
	return err
}

// call runs a tool and decodes its structured result into v; a tool
// error is returned with the problem it carries.
func call(ctx context.Context, s *mcp.ClientSession, tool string, args map[string]any, v any) error {
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return fmt.Errorf("%s: %w", tool, err)
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return fmt.Errorf("%s: %w", tool, err)
	}
	if res.IsError {
		return fmt.Errorf("%s: %s", tool, b)
	}
	if v == nil {
		return nil
	}
	return json.Unmarshal(b, v)
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func indent(s string) string {
	return strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ") + "\n"
}
