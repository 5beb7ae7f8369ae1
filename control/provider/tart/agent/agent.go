// Package agent puts a host's tart Driver behind HTTP, for a Mac that is
// not the machine control runs on: cmd/sbx-macd serves Handler on the
// Mac, and control's tart provider uses Client as that host's Driver.
// Every request carries the internal-API token as a bearer token; the
// agent refuses any other (there is no unauthenticated route).
package agent

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/sbxedge/sbx/control/provider/tart"
)

var (
	_ tart.Driver      = (*Client)(nil)
	_ tart.BundleMover = (*Client)(nil)
)

// request is every call's body; each op reads the fields it needs.
type request struct {
	Name        string        `json:"name,omitempty"`
	Src         string        `json:"src,omitempty"`
	Dst         string        `json:"dst,omitempty"`
	CPU         int           `json:"cpu,omitempty"`
	MemoryMB    int           `json:"memory_mb,omitempty"`
	Suspendable bool          `json:"suspendable,omitempty"`
	Wait        time.Duration `json:"wait,omitempty"`
	Stdin       []byte        `json:"stdin,omitempty"`
	Argv        []string      `json:"argv,omitempty"`
	Key         string        `json:"key,omitempty"` // a bundle's object key
}

// response is every call's answer.
type response struct {
	Error   string           `json:"error,omitempty"`
	Kind    string           `json:"kind,omitempty"` // no_ip, limit, no_bundle_store: errors the provider tells apart
	Version string           `json:"version,omitempty"`
	VMs     []tart.VM        `json:"vms,omitempty"`
	Exit    *tart.Exit       `json:"exit,omitempty"`
	IP      string           `json:"ip,omitempty"`
	Exec    *tart.ExecResult `json:"exec,omitempty"`
	Free    uint64           `json:"free,omitempty"`
	OS      string           `json:"os,omitempty"`
	Exists  bool             `json:"exists,omitempty"`
}

// Handler serves d to callers bearing token.
func Handler(d tart.Driver, token string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if token == "" || !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		op, ok := strings.CutPrefix(r.URL.Path, "/v1/")
		if r.Method != http.MethodPost || !ok {
			http.NotFound(w, r)
			return
		}
		var req request
		if err := json.NewDecoder(io.LimitReader(r.Body, 64<<20)).Decode(&req); err != nil {
			http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
			return
		}
		res, err := serve(r.Context(), d, op, req)
		if err != nil {
			res.Error = err.Error()
			switch {
			case errors.Is(err, tart.ErrNoIP):
				res.Kind = "no_ip"
			case errors.Is(err, tart.ErrLimit):
				res.Kind = "limit"
			case errors.Is(err, tart.ErrNoBundleStore):
				res.Kind = "no_bundle_store"
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(res)
	})
}

func serve(ctx context.Context, d tart.Driver, op string, q request) (response, error) {
	var res response
	var err error
	switch op {
	case "version":
		res.Version, err = d.Version(ctx)
	case "list":
		res.VMs, err = d.List(ctx)
	case "clone":
		err = d.Clone(ctx, q.Src, q.Dst)
	case "set":
		err = d.Set(ctx, q.Name, q.CPU, q.MemoryMB)
	case "rename":
		err = d.Rename(ctx, q.Src, q.Dst)
	case "run":
		// Not the request's context: the VM outlives the call.
		err = d.Run(context.WithoutCancel(ctx), q.Name, q.Suspendable)
	case "wait":
		var e tart.Exit
		e, err = d.Wait(ctx, q.Name)
		res.Exit = &e
	case "stop":
		err = d.Stop(ctx, q.Name)
	case "suspend":
		err = d.Suspend(ctx, q.Name)
	case "delete":
		err = d.Delete(ctx, q.Name)
	case "ip":
		res.IP, err = d.IP(ctx, q.Name, q.Wait)
	case "exec":
		var e tart.ExecResult
		e, err = d.Exec(ctx, q.Name, q.Stdin, q.Argv...)
		res.Exec = &e
	case "free":
		res.Free, err = d.FreeDiskBytes(ctx)
	case "os":
		res.OS, err = d.OSVersion(ctx)
	case "bundle-store", "bundle-load", "bundle-exists", "bundle-delete":
		// The agent moves bundles between its disk and its own object
		// storage: only the key crosses to control.
		bm, ok := d.(tart.BundleMover)
		if !ok {
			return res, tart.ErrNoBundleStore
		}
		if q.Key == "" {
			return res, errors.New("no bundle key")
		}
		switch op {
		case "bundle-store":
			err = bm.StoreBundle(ctx, q.Name, q.Key)
		case "bundle-load":
			err = bm.LoadBundle(ctx, q.Key, q.Name)
		case "bundle-exists":
			res.Exists, err = bm.BundleExists(ctx, q.Key)
		default:
			err = bm.DeleteBundle(ctx, q.Key)
		}
	default:
		err = fmt.Errorf("unknown operation %q", op)
	}
	return res, err
}

// Client is a host agent's Driver, reached at BaseURL with Token.
type Client struct {
	BaseURL string
	Token   string
	HTTP    *http.Client
}

func (c *Client) call(ctx context.Context, op string, q request) (response, error) {
	body, err := json.Marshal(q)
	if err != nil {
		return response{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(c.BaseURL, "/")+"/v1/"+op, bytes.NewReader(body))
	if err != nil {
		return response{}, err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	req.Header.Set("Content-Type", "application/json")
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return response{}, fmt.Errorf("host agent %s: %w", c.BaseURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized {
		return response{}, fmt.Errorf("host agent %s refused the token (401): the host's token must be the agent's SBX_MACD_TOKEN (the hosts file's tokenFile, else control's internal-API secret)", c.BaseURL)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return response{}, fmt.Errorf("host agent %s: %s: %s", c.BaseURL, resp.Status, strings.TrimSpace(string(b)))
	}
	var res response
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		return response{}, fmt.Errorf("host agent %s: %w", c.BaseURL, err)
	}
	if res.Error != "" {
		switch res.Kind {
		case "no_ip":
			return res, tart.ErrNoIP
		case "limit":
			return res, fmt.Errorf("%w: %s", tart.ErrLimit, res.Error)
		case "no_bundle_store":
			return res, fmt.Errorf("host agent %s: %w", c.BaseURL, tart.ErrNoBundleStore)
		}
		return res, errors.New(res.Error)
	}
	return res, nil
}

func (c *Client) Version(ctx context.Context) (string, error) {
	r, err := c.call(ctx, "version", request{})
	return r.Version, err
}

func (c *Client) List(ctx context.Context) ([]tart.VM, error) {
	r, err := c.call(ctx, "list", request{})
	return r.VMs, err
}

func (c *Client) Clone(ctx context.Context, src, dst string) error {
	_, err := c.call(ctx, "clone", request{Src: src, Dst: dst})
	return err
}

func (c *Client) Set(ctx context.Context, name string, cpu, memoryMB int) error {
	_, err := c.call(ctx, "set", request{Name: name, CPU: cpu, MemoryMB: memoryMB})
	return err
}

func (c *Client) Rename(ctx context.Context, old, name string) error {
	_, err := c.call(ctx, "rename", request{Src: old, Dst: name})
	return err
}

func (c *Client) Run(ctx context.Context, name string, suspendable bool) error {
	_, err := c.call(ctx, "run", request{Name: name, Suspendable: suspendable})
	return err
}

func (c *Client) Wait(ctx context.Context, name string) (tart.Exit, error) {
	for {
		r, err := c.call(ctx, "wait", request{Name: name})
		if err == nil && r.Exit != nil {
			return *r.Exit, nil
		}
		if ctx.Err() != nil {
			return tart.Exit{}, ctx.Err()
		}
		// The agent restarted or the network broke: ask again; a VM
		// that ended meanwhile answers at once.
		select {
		case <-ctx.Done():
			return tart.Exit{}, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func (c *Client) Stop(ctx context.Context, name string) error {
	_, err := c.call(ctx, "stop", request{Name: name})
	return err
}

func (c *Client) Suspend(ctx context.Context, name string) error {
	_, err := c.call(ctx, "suspend", request{Name: name})
	return err
}

func (c *Client) Delete(ctx context.Context, name string) error {
	_, err := c.call(ctx, "delete", request{Name: name})
	return err
}

func (c *Client) IP(ctx context.Context, name string, wait time.Duration) (string, error) {
	r, err := c.call(ctx, "ip", request{Name: name, Wait: wait})
	return r.IP, err
}

func (c *Client) Exec(ctx context.Context, name string, stdin []byte, argv ...string) (tart.ExecResult, error) {
	r, err := c.call(ctx, "exec", request{Name: name, Stdin: stdin, Argv: argv})
	if r.Exec == nil {
		return tart.ExecResult{}, err
	}
	return *r.Exec, err
}

func (c *Client) FreeDiskBytes(ctx context.Context) (uint64, error) {
	r, err := c.call(ctx, "free", request{})
	return r.Free, err
}

func (c *Client) OSVersion(ctx context.Context) (string, error) {
	r, err := c.call(ctx, "os", request{})
	return r.OS, err
}

// StoreBundle has the agent export the stopped VM name and upload it
// under key to its own object storage.
func (c *Client) StoreBundle(ctx context.Context, name, key string) error {
	_, err := c.call(ctx, "bundle-store", request{Name: name, Key: key})
	return err
}

// LoadBundle has the agent download key from its object storage and
// import it as the VM name.
func (c *Client) LoadBundle(ctx context.Context, key, name string) error {
	_, err := c.call(ctx, "bundle-load", request{Name: name, Key: key})
	return err
}

func (c *Client) BundleExists(ctx context.Context, key string) (bool, error) {
	r, err := c.call(ctx, "bundle-exists", request{Key: key})
	return r.Exists, err
}

func (c *Client) DeleteBundle(ctx context.Context, key string) error {
	_, err := c.call(ctx, "bundle-delete", request{Key: key})
	return err
}
