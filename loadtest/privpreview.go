package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"time"

	"github.com/sbxedge/sbx/control/apiclient"
)

// privConfig bounds the private-preview scenario.
type privConfig struct {
	Rounds   int
	Conns    int
	Duration time.Duration
	Timeout  time.Duration
}

func (c *privConfig) Validate() error {
	var errs []error
	if c.Rounds < 1 || c.Rounds > 20 {
		errs = append(errs, errors.New("--rounds must be 1..20"))
	}
	if c.Conns < 1 || c.Conns > 1024 {
		errs = append(errs, errors.New("--conns must be 1..1024"))
	}
	if c.Duration <= 0 || c.Duration > time.Minute {
		errs = append(errs, errors.New("--duration must be (0, 1m]"))
	}
	if c.Timeout <= 0 || c.Timeout > 30*time.Minute {
		errs = append(errs, errors.New("--timeout must be (0, 30m]"))
	}
	return errors.Join(errs...)
}

// runPrivPreview measures what authorisation costs a preview on the real
// stack: control (SQLite) and the edge in this process, as sbx dev runs
// them, the edge asking control over the loopback internal API. The same
// app is exposed twice, public and private; the private one is loaded
// with the account's token as a Bearer. Rounds rotate the order.
func runPrivPreview(ctx context.Context, args []string) error {
	c := privConfig{}
	fs := flag.NewFlagSet("loadtest private", flag.ContinueOnError)
	fs.IntVar(&c.Rounds, "rounds", 3, "rounds; cells are medians with ranges")
	fs.IntVar(&c.Conns, "conns", 64, "concurrent keep-alive connections")
	fs.DurationVar(&c.Duration, "duration", 5*time.Second, "length of each run")
	fs.DurationVar(&c.Timeout, "timeout", 10*time.Minute, "bound on the whole run")
	if err := parseConfig(fs, args, &c); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	dir, err := os.MkdirTemp("", "sbx-loadtest-private-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	st, err := startDevStack(ctx, dir)
	if err != nil {
		return err
	}
	defer st.close()
	api, tok := st.api, st.token
	created, err := apiclient.Result(api.CreateSandboxWithResponse(ctx, nil, apiclient.CreateSandbox{}))
	if err != nil {
		return fmt.Errorf("create sandbox: %w", err)
	}
	id := created.JSON201.Id
	defer func() { _, _ = api.DeleteSandboxWithResponse(context.Background(), id, nil) }()
	if err := apiclient.WatchEvents(ctx, api, id, 0, func(e apiclient.Event) (bool, error) {
		return e.State == nil || *e.State != "ready", nil
	}); err != nil {
		return fmt.Errorf("wait for ready: %w", err)
	}
	// The sandbox's app: the local provider's sandboxes share this
	// machine's loopback.
	expose := func(access apiclient.PortRequestAccess) (string, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		srv := &http.Server{Handler: upstreamHandler(), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		context.AfterFunc(ctx, func() { _ = srv.Close() })
		r, err := apiclient.Result(api.ExposePortWithResponse(ctx, id, apiclient.PortRequest{Port: ln.Addr().(*net.TCPAddr).Port, Access: &access}))
		if err != nil {
			return "", fmt.Errorf("expose %s port: %w", access, err)
		}
		p := r.JSON201
		if p == nil {
			p = r.JSON200
		}
		u, err := url.Parse(p.Url)
		if err != nil {
			return "", err
		}
		return u.Host, nil
	}
	pubHost, err := expose("public")
	if err != nil {
		return err
	}
	privHost, err := expose("private")
	if err != nil {
		return err
	}
	addr := st.previewAddr
	paths := []path{
		{name: "public", addr: addr, host: pubHost},
		{name: "private-token", addr: addr, host: privHost, header: http.Header{"Authorization": {"Bearer " + tok}}},
	}
	rps := map[string][]float64{}
	p99 := map[string][]float64{}
	pc := previewConfig{Duration: c.Duration}
	for round := range c.Rounds {
		for i := range paths {
			p := paths[(i+round)%len(paths)]
			r, err := smallRequests(ctx, p, pc, c.Conns)
			if err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
			rps[p.name] = append(rps[p.name], r.rps)
			p99[p.name] = append(p99[p.name], r.p99)
		}
	}
	fmt.Printf("preview 1 KiB GETs on the real stack (control SQLite + edge in one process), %d conns, %d rounds × %v, median [range]\n",
		c.Conns, c.Rounds, c.Duration)
	base := median(rps["public"])
	for _, p := range paths {
		v := rps[p.name]
		fmt.Printf("  %-14s %9.0f req/s [%.0f – %.0f]  p99 %6.0f µs  %.2f× public\n", p.name, median(v), slices.Min(v), slices.Max(v),
			median(p99[p.name]), median(v)/base)
	}
	return nil
}
