package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// apiClient talks to the REST API and renders problem documents as errors.
type apiClient struct {
	base  string
	token string
	http  *http.Client
}

type apiError struct {
	Status int    `json:"status"`
	Code   string `json:"code"`
	Title  string `json:"title"`
	Detail string `json:"detail"`
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Detail)
}

func (c *apiClient) do(ctx context.Context, method, path string, body io.Reader, ctype string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	return c.send(req)
}

// send authenticates req, sends it, and turns an error status into an
// error (an *apiError for problem documents).
func (c *apiClient) send(req *http.Request) (*http.Response, error) {
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 400 {
		defer resp.Body.Close()
		var p apiError
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if json.Unmarshal(b, &p) != nil || p.Code == "" {
			return nil, fmt.Errorf("%s %s: %s: %s", req.Method, req.URL.Path, resp.Status, bytes.TrimSpace(b))
		}
		return nil, &p
	}
	return resp, nil
}

// json sends v (if non-nil) and decodes the answer into out.
func (c *apiClient) json(ctx context.Context, method, path string, v, out any) error {
	var body io.Reader
	ctype := ""
	if v != nil {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		body, ctype = bytes.NewReader(b), "application/json"
	}
	resp, err := c.do(ctx, method, path, body, ctype)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

func newClient(fs *flag.FlagSet) (*apiClient, func() error) {
	api := fs.String("api", os.Getenv("SBX_API"), "API base URL (SBX_API)")
	tok := fs.String("token", os.Getenv("SBX_TOKEN"), "account agent token (SBX_TOKEN)")
	c := &apiClient{http: &http.Client{}}
	return c, func() error {
		c.base = strings.TrimRight(*api, "/")
		if c.base == "" {
			c.base = "http://127.0.0.1:8080"
		}
		c.token = *tok
		if c.token == "" {
			b, err := os.ReadFile(filepath.Join(defaultDataDir(), "token"))
			if err != nil {
				return errors.New("no token: set SBX_TOKEN or --token (sbx dev writes one to its data dir)")
			}
			c.token = strings.TrimSpace(string(b))
		}
		return nil
	}
}

type sandbox struct {
	ID         string    `json:"id"`
	Status     string    `json:"status"`
	Profile    string    `json:"profile"`
	Platform   string    `json:"platform"`
	DeadlineAt time.Time `json:"deadline_at"`
	EndReason  *string   `json:"end_reason"`
}

func runClient(ctx context.Context, cmd string, args []string) error {
	fs := flag.NewFlagSet("sbx "+cmd, flag.ContinueOnError)
	c, finish := newClient(fs)
	switch cmd {
	case "create":
		profile := fs.String("profile", "tuist-linux-small", "sandbox profile")
		deadline := fs.Int("deadline", 0, "deadline in minutes (default: server's, 60)")
		wait := fs.Duration("wait", 2*time.Minute, "how long to wait for ready (0: do not wait)")
		if err := parse(fs, args, finish); err != nil {
			return err
		}
		body := map[string]any{"profile": *profile}
		if *deadline > 0 {
			body["deadline_minutes"] = *deadline
		}
		var sb sandbox
		if err := c.json(ctx, http.MethodPost, "/api/v1/sandboxes", body, &sb); err != nil {
			return err
		}
		if *wait > 0 {
			var err error
			if sb, err = waitReady(ctx, c, sb.ID, *wait); err != nil {
				return err
			}
		}
		return printJSON(sb)
	case "list":
		if err := parse(fs, args, finish); err != nil {
			return err
		}
		var out struct{ Sandboxes []sandbox }
		if err := c.json(ctx, http.MethodGet, "/api/v1/sandboxes?limit=200", nil, &out); err != nil {
			return err
		}
		for _, sb := range out.Sandboxes {
			fmt.Printf("%s  %-11s %-20s deadline %s\n", sb.ID, sb.Status, sb.Profile, sb.DeadlineAt.Local().Format(time.DateTime))
		}
		return nil
	case "get", "destroy":
		if err := parse(fs, args, finish); err != nil {
			return err
		}
		id, err := arg(fs, 0, "ID")
		if err != nil {
			return err
		}
		method := http.MethodGet
		if cmd == "destroy" {
			method = http.MethodDelete
		}
		var out map[string]any
		if err := c.json(ctx, method, "/api/v1/sandboxes/"+url.PathEscape(id), nil, &out); err != nil {
			return err
		}
		return printJSON(out)
	case "extend":
		if err := parse(fs, args, finish); err != nil {
			return err
		}
		id, err := arg(fs, 0, "ID")
		if err != nil {
			return err
		}
		var minutes int
		if _, err := fmt.Sscan(fs.Arg(1), &minutes); err != nil {
			return errors.New("usage: sbx extend ID MINUTES")
		}
		var out map[string]any
		if err := c.json(ctx, http.MethodPatch, "/api/v1/sandboxes/"+url.PathEscape(id), map[string]int{"deadline_minutes": minutes}, &out); err != nil {
			return err
		}
		return printJSON(out)
	case "usage":
		if err := parse(fs, args, finish); err != nil {
			return err
		}
		var out map[string]any
		if err := c.json(ctx, http.MethodGet, "/api/v1/usage", nil, &out); err != nil {
			return err
		}
		return printJSON(out)
	case "events":
		return runEvents(ctx, c, fs, args, finish)
	case "exec":
		return runExec(ctx, c, fs, args, finish)
	case "files":
		return runFiles(ctx, c, fs, args, finish)
	case "ports":
		return runPorts(ctx, c, fs, args, finish)
	}
	return fmt.Errorf("unknown command %q", cmd)
}

func parse(fs *flag.FlagSet, args []string, finish func() error) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	return finish()
}

func arg(fs *flag.FlagSet, i int, name string) (string, error) {
	if fs.NArg() <= i || fs.Arg(i) == "" {
		return "", fmt.Errorf("missing %s", name)
	}
	return fs.Arg(i), nil
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func runExec(ctx context.Context, c *apiClient, fs *flag.FlagSet, args []string, finish func() error) error {
	timeout := fs.Float64("timeout", 60, "seconds before the command's process group is killed")
	if err := parse(fs, args, finish); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) < 2 {
		return errors.New("usage: sbx exec ID -- CMD [ARG...]")
	}
	id, argv := rest[0], rest[1:]
	if argv[0] == "--" {
		argv = argv[1:]
	}
	if len(argv) == 0 {
		return errors.New("usage: sbx exec ID -- CMD [ARG...]")
	}
	body := map[string]any{"command": argv[0], "args": argv[1:], "timeout_seconds": *timeout}
	var res struct {
		ExitCode       int    `json:"exit_code"`
		Stdout         string `json:"stdout"`
		Stderr         string `json:"stderr"`
		StdoutEncoding string `json:"stdout_encoding"`
		StderrEncoding string `json:"stderr_encoding"`
		TimedOut       bool   `json:"timed_out"`
		Truncated      bool   `json:"truncated"`
	}
	if err := c.json(ctx, http.MethodPost, "/api/v1/sandboxes/"+url.PathEscape(id)+"/exec", body, &res); err != nil {
		return err
	}
	writeOut(os.Stdout, res.Stdout, res.StdoutEncoding)
	writeOut(os.Stderr, res.Stderr, res.StderrEncoding)
	if res.Truncated {
		fmt.Fprintln(os.Stderr, "sbx: output truncated")
	}
	if res.TimedOut {
		return fmt.Errorf("command timed out after %gs", *timeout)
	}
	if res.ExitCode != 0 {
		os.Exit(res.ExitCode)
	}
	return nil
}

func writeOut(w io.Writer, s, enc string) {
	if enc == "base64" {
		b, _ := base64.StdEncoding.DecodeString(s)
		_, _ = w.Write(b)
		return
	}
	_, _ = io.WriteString(w, s)
}
