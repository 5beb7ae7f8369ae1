package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sbxedge/sbx/control"
	"github.com/sbxedge/sbx/control/apiclient"
	"github.com/sbxedge/sbx/control/devseed"
	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/standalone"
	"github.com/sbxedge/sbx/internal/podssh"
)

// execConfig bounds the exec round-trip scenario.
type execConfig struct {
	Rounds  int           // rounds per path; the figure is the median of round medians
	Calls   int           // exec calls per round and path
	Timeout time.Duration // the whole run
}

func (c *execConfig) Validate() error {
	var errs []error
	if c.Rounds < 3 || c.Rounds > 20 {
		errs = append(errs, errors.New("--rounds must be 3..20"))
	}
	if c.Calls < 1 || c.Calls > 1000 {
		errs = append(errs, errors.New("--calls must be 1..1000"))
	}
	if c.Timeout <= 0 || c.Timeout > 30*time.Minute {
		errs = append(errs, errors.New("--timeout must be (0, 30m]"))
	}
	return errors.Join(errs...)
}

// runExec measures one exec round trip (`true` in a ready sandbox) three
// ways in the same run, against one in-process control (SQLite, the local
// provider's embedded sshd):
//
//   - rest: POST /api/v1/sandboxes/{id}/exec with the generated client;
//   - mcp: the exec_in_sandbox tool over Streamable HTTP with the MCP Go
//     SDK's client (one session; each call is an HTTP POST whose answer
//     streams, and the tool runs the streamed exec in-process);
//   - ssh: the same command line (podssh.Exec) on a new session of an open
//     SSH connection to the sandbox's sshd: what control does under REST,
//     without HTTP.
//
// The paths take turns within each round so drift on a shared machine
// hits them alike.
func runExec(ctx context.Context, args []string) error {
	c := execConfig{}
	fs := flag.NewFlagSet("loadtest exec", flag.ContinueOnError)
	fs.IntVar(&c.Rounds, "rounds", 5, "rounds per path")
	fs.IntVar(&c.Calls, "calls", 40, "exec calls per round and path")
	fs.DurationVar(&c.Timeout, "timeout", 5*time.Minute, "bound on the whole run")
	if err := parseConfig(fs, args, &c); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()

	dir, err := os.MkdirTemp("", "sbx-loadtest-exec-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	svc, err := control.Open(ctx, standalone.Fill(control.Config{
		DataDir: dir, APIAddr: "127.0.0.1:0", SSHHost: "127.0.0.1", SSHPort: 22,
		// As sbx dev: a create that names no profile gets the dev default.
		Lifecycle: lifecycle.Config{DefaultProfile: devseed.DefaultProfile},
	}))
	if err != nil {
		return err
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer scancel()
		_ = svc.Shutdown(sctx)
	}()
	tok, _, err := devseed.Seed(ctx, svc.Store, "", filepath.Join(dir, "token"))
	if err != nil {
		return err
	}
	if err := svc.Start(ctx); err != nil {
		return err
	}
	api, err := apiclient.New(svc.URL(), tok, nil)
	if err != nil {
		return err
	}
	created, err := apiclient.Result(api.CreateSandboxWithResponse(ctx, nil, apiclient.CreateSandbox{}))
	if err != nil {
		return fmt.Errorf("create sandbox: %w", err)
	}
	id := created.JSON201.Id
	defer func() { _, _ = api.DeleteSandboxWithResponse(context.Background(), id, nil) }()
	err = apiclient.WatchEvents(ctx, api, id, 0, func(e apiclient.Event) (bool, error) {
		return e.State == nil || *e.State != "ready", nil
	})
	if err != nil {
		return fmt.Errorf("wait for ready: %w", err)
	}

	sb, err := svc.Store.Sandbox(ctx, id)
	if err != nil {
		return err
	}
	target := podssh.Target{SandboxID: sb.ID, Addr: sb.Endpoint, User: sb.SSHUser, HostKey: sb.HostKey, Workspace: sb.Workspace}
	sshClient, err := svc.Pool.Client(ctx, target)
	if err != nil {
		return fmt.Errorf("ssh to the sandbox: %w", err)
	}

	mcpClient := mcp.NewClient(&mcp.Implementation{Name: "loadtest", Version: "1"}, nil)
	session, err := mcpClient.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: svc.URL() + "/mcp",
		HTTPClient: &http.Client{Transport: bearerRT{tok}}, DisableStandaloneSSE: true}, nil)
	if err != nil {
		return fmt.Errorf("mcp connect: %w", err)
	}
	defer session.Close()

	paths := []struct {
		name string
		call func() error
	}{
		{"ssh", func() error {
			res, err := podssh.Exec(ctx, sshClient, podssh.ExecRequest{Command: "true", Dir: sb.Workspace, Timeout: time.Minute})
			return exitErr(res.ExitCode, err)
		}},
		{"rest", func() error {
			r, err := apiclient.Result(api.ExecInSandboxWithResponse(ctx, id, apiclient.ExecRequest{Command: "true"}))
			if err != nil {
				return err
			}
			return exitErr(r.JSON200.ExitCode, nil)
		}},
		{"mcp", func() error {
			res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "exec_in_sandbox",
				Arguments: map[string]any{"sandbox_id": id, "command": "true"}})
			if err == nil && res.IsError {
				err = fmt.Errorf("tool error: %v", res.Content)
			}
			return err
		}},
	}
	// One warm-up call each: connections, the SDK's first-use work.
	for _, p := range paths {
		if err := p.call(); err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
	}
	medians := make(map[string][]time.Duration)
	for range c.Rounds {
		for _, p := range paths {
			lat := make([]time.Duration, 0, c.Calls)
			for range c.Calls {
				start := time.Now()
				if err := p.call(); err != nil {
					return fmt.Errorf("%s: %w", p.name, err)
				}
				lat = append(lat, time.Since(start))
			}
			medians[p.name] = append(medians[p.name], median(lat))
		}
	}
	fmt.Printf("exec round trip (`true`), %d rounds × %d calls per path, median of round medians [range]\n", c.Rounds, c.Calls)
	base := median(medians["ssh"])
	for _, p := range paths {
		m := medians[p.name]
		fmt.Printf("  %-4s %8.2f ms  [%.2f – %.2f]  %.2f× ssh\n", p.name, ms(median(m)), ms(slices.Min(m)), ms(slices.Max(m)),
			float64(median(m))/float64(base))
	}
	return nil
}

func exitErr(code int, err error) error {
	if err == nil && code != 0 {
		err = fmt.Errorf("exit code %d", code)
	}
	return err
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// bearerRT authenticates the MCP client's requests.
type bearerRT struct{ token string }

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}
