package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/sbxedge/sbx/control/apiclient"
	"github.com/sbxedge/sbx/internal/connlog"
)

var termIsTerminal = term.IsTerminal

// app is what every command shares: the standard streams, the global
// flags and, built on first use, the API client.
type app struct {
	in   io.Reader
	out  io.Writer
	errw io.Writer

	apiFlag string
	output  string
	debug   bool
	timeout time.Duration

	client *apiClient
}

func newApp(in io.Reader, out, errw io.Writer) *app {
	return &app{in: in, out: out, errw: errw}
}

// cliConfig is the file sbx login writes: the API to use by default and a
// token per API. It holds secrets, so it is written 0600 in a 0700 folder.
type cliConfig struct {
	// API is used when neither --api nor SBX_API names one: the last API
	// sbx login was given with --api.
	API string `json:"api,omitempty"`
	// Tokens maps an API (apiKey form) to the token saved for it, sent to
	// that API only.
	Tokens map[string]string `json:"tokens,omitempty"`
	// Token is the one token of files an older sbx wrote. readConfig moves
	// it into Tokens under the file's API, else under defaultAPI (the API
	// that file alone pointed the token at); it stays here, sent nowhere,
	// only if that URL does not parse.
	Token string `json:"token,omitempty"`
}

// configDir is where sbx keeps its config and the brokers' pinned host
// keys: $SBX_CONFIG_DIR, else ~/.config/sbx.
func configDir() string {
	if d := os.Getenv("SBX_CONFIG_DIR"); d != "" {
		return d
	}
	d, err := os.UserConfigDir()
	if err != nil {
		return ".sbx-config"
	}
	return filepath.Join(d, "sbx")
}

func configFile() string { return filepath.Join(configDir(), "config.json") }

func readConfig() (cliConfig, error) {
	var c cliConfig
	b, err := os.ReadFile(configFile())
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("read config: %w", err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("config %s: %w", configFile(), err)
	}
	if c.Token != "" {
		api := c.API
		if api == "" {
			api = defaultAPI
		}
		if key, ok := apiKey(api); ok {
			if c.Tokens[key] == "" {
				if c.Tokens == nil {
					c.Tokens = map[string]string{}
				}
				c.Tokens[key] = c.Token
			}
			c.Token = ""
		}
	}
	return c, nil
}

func writeConfig(c cliConfig) error {
	if err := os.MkdirAll(configDir(), 0o700); err != nil {
		return fmt.Errorf("create %s: %w", configDir(), err)
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(configFile(), append(b, '\n'), 0o600)
}

const defaultAPI = "http://127.0.0.1:8080"

// apiURL is the API base URL: --api, SBX_API, the config file, the default.
func (a *app) apiURL() string {
	if a.apiFlag != "" {
		return localhostAsIPv4(strings.TrimRight(a.apiFlag, "/"))
	}
	if v := os.Getenv("SBX_API"); v != "" {
		return localhostAsIPv4(strings.TrimRight(v, "/"))
	}
	if c, err := readConfig(); err == nil && c.API != "" {
		return localhostAsIPv4(strings.TrimRight(c.API, "/"))
	}
	return defaultAPI
}

// localhostAsIPv4 puts 127.0.0.1 in place of a URL's host "localhost".
// The token saved for http://127.0.0.1:8080 is then the one for
// http://localhost:8080 too (apiKey), and it goes to that one socket:
// localhost also resolves to ::1, where another program may listen on the
// same port, and a dial to "localhost" could reach it instead.
func localhostAsIPv4(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || !strings.EqualFold(u.Hostname(), "localhost") {
		return raw
	}
	port := u.Port()
	u.Host = "127.0.0.1"
	if port != "" {
		u.Host = net.JoinHostPort("127.0.0.1", port)
	}
	return u.String()
}

// sameAPI reports whether two API URLs name the same API (apiKey form).
func sameAPI(x, y string) bool {
	kx, ok1 := apiKey(x)
	ky, ok2 := apiKey(y)
	return ok1 && ok2 && kx == ky
}

// api returns the client, building it on first use.
func (a *app) api() (*apiClient, error) {
	if a.client != nil {
		return a.client, nil
	}
	// A URL without a scheme (127.0.0.1:8080) is a typo to fix, not an
	// unreachable API or a missing token.
	if _, ok := apiKey(a.apiURL()); !ok {
		return nil, &usageError{cmd: "sbx", msg: fmt.Sprintf("the API URL %s (--api, SBX_API or the config file) is not an http:// or https:// URL with a host; write it like %s", redactedURL(a.apiURL()), defaultAPI)}
	}
	tok, err := a.token()
	if err != nil {
		return nil, err
	}
	a.client = a.newClient(a.apiURL(), tok)
	return a.client, nil
}

// newClient builds a client for base with tok, with the global flags'
// timeouts and debug log.
func (a *app) newClient(base, tok string) *apiClient {
	gen, err := apiclient.New(base, tok, &http.Client{Transport: &headerTimeout{next: a.transport(), base: base, limit: a.timeout}})
	if err != nil {
		// Only a base URL that does not parse; the first call reports it.
		gen = &apiclient.ClientWithResponses{ClientInterface: &apiclient.Client{Server: base, Client: errDoer{err}}}
	}
	return &apiClient{base: base, gen: gen}
}

// errDoer fails every request with err.
type errDoer struct{ err error }

func (d errDoer) Do(*http.Request) (*http.Response, error) { return nil, d.err }

// transport is how every API client of the CLI reaches the API: bounded
// dials and handshakes, and the --debug log.
func (a *app) transport() http.RoundTripper {
	var rt http.RoundTripper = &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		// A dead address fails in seconds instead of the OS's minutes.
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConns:        10,
		IdleConnTimeout:     90 * time.Second,
	}
	if a.debug {
		rt = debugTransport{next: rt, w: a.errw}
	}
	return clientHeader{rt}
}

// clientHeader names the CLI on every API request (Sbx-Client), so the
// connection log records its terminals and exec streams as sbx's.
type clientHeader struct{ next http.RoundTripper }

func (c clientHeader) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Header.Get(connlog.HeaderClient) == "" {
		req = req.Clone(req.Context())
		req.Header.Set(connlog.HeaderClient, connlog.ClientSbx)
	}
	return c.next.RoundTrip(req)
}

// debugTransport logs each request's method, URL, headers and status to
// stderr with the Authorization header redacted. Bodies are not logged:
// an SSH credential's private key travels in one.
type debugTransport struct {
	next http.RoundTripper
	w    io.Writer
}

func (d debugTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	fmt.Fprintf(d.w, "> %s %s\n", req.Method, req.URL)
	for k, vs := range req.Header {
		for _, v := range vs {
			if strings.EqualFold(k, "Authorization") || strings.EqualFold(k, "X-Sbx-Preview-Token") || strings.EqualFold(k, "Cookie") {
				v = "[REDACTED]"
			}
			fmt.Fprintf(d.w, "> %s: %s\n", k, v)
		}
	}
	resp, err := d.next.RoundTrip(req)
	if err != nil {
		fmt.Fprintf(d.w, "< error after %s: %v\n", time.Since(start).Round(time.Millisecond), err)
		return nil, err
	}
	fmt.Fprintf(d.w, "< %s (%s)\n", resp.Status, time.Since(start).Round(time.Millisecond))
	return resp, nil
}

// localError reports whether err, a net.Error on its face, failed on
// this machine rather than on the way to the API: a file a request's
// body was to be read from (a *url.Error is a net.Error whatever it
// wraps), or a listener of sbx dev's own.
func localError(err error) bool {
	var pe *fs.PathError
	var oe *net.OpError
	return errors.As(err, &pe) || errors.As(err, &oe) && oe.Op == "listen"
}

// explain turns an error into an exit code and one line that says what
// to do about it.
// previewNotFound is the problem code the preview proxy (edge/preview)
// answers a host it serves no preview at with; the API never uses it.
const previewNotFound = "preview_not_found"

func (a *app) explain(err error) (int, string) {
	var ue *usageError
	if errors.As(err, &ue) {
		return 2, ue.Error()
	}
	var te *timedOutError
	if errors.As(err, &te) {
		return exitTimedOut, te.msg
	}
	if msg := err.Error(); strings.HasPrefix(msg, "unknown command") {
		// cobra's suggestion spans lines; one line for us.
		msg, suggestions, _ := strings.Cut(msg, "\n\nDid you mean this?\n")
		if s := strings.Fields(suggestions); len(s) > 0 {
			msg += "; did you mean " + strings.Join(s, " or ") + "?"
		}
		return 2, msg + " (see 'sbx --help')"
	}
	if errors.Is(err, apiclient.ErrDotSegment) {
		return 2, err.Error()
	}
	if errors.Is(err, errNoToken) {
		return 4, err.Error()
	}
	var nf *notFoundError
	if errors.As(err, &nf) {
		return 5, nf.Error()
	}
	var pe *apiError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == previewNotFound:
			// The preview proxy speaks problem documents too, but its 404
			// for a host it serves no preview at means --api names the
			// preview port (sbx dev's 8081), not the API.
			return 3, fmt.Sprintf("the server at %s is not the sbx API: it is the preview proxy (it answered %d %s): check --api / SBX_API (sbx dev serves the API on 127.0.0.1:8080 by default, previews on 8081)",
				a.apiURL(), pe.Status, pe.Code)
		case pe.Status == http.StatusUnauthorized:
			return 4, fmt.Sprintf("the API at %s refused the token (%s): check SBX_TOKEN, or run `sbx login` with a valid token", a.apiURL(), pe.Detail)
		case pe.Status == http.StatusForbidden && pe.Code != "permission_denied":
			return 4, fmt.Sprintf("not allowed: %s (%s)", pe.Detail, pe.Code)
		case pe.Status == http.StatusNotFound:
			return 5, pe.Detail
		case pe.Code == "unknown_profile":
			return 1, pe.Detail + "; " + a.validProfiles()
		}
		return 1, fmt.Sprintf("%s (%s)", pe.Detail, pe.Code)
	}
	var np *apiclient.NotProblemError
	if errors.As(err, &np) {
		// Whatever answered is not the sbx API, which answers every error
		// with a problem document: the API was not reached.
		return 3, fmt.Sprintf("the server at %s is not the sbx API, or a proxy in front of it failed (%s %s answered %s without a problem document%s): check --api / SBX_API",
			a.apiURL(), np.Method, np.Path, np.Status, excerptSuffix(np.Body))
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return 3, fmt.Sprintf("cannot reach the API at %s (connection refused): start it with `sbx dev`, or point --api / SBX_API at a running API", a.apiURL())
	}
	var apiTimeout *apiTimeoutError
	if errors.As(err, &apiTimeout) {
		return 3, apiTimeout.Error()
	}
	var ne net.Error
	if errors.As(err, &ne) && !localError(err) {
		return 3, fmt.Sprintf("cannot reach the API at %s: %v", a.apiURL(), err)
	}
	if errors.Is(err, context.Canceled) {
		return exitInterrupted, "interrupted"
	}
	return 1, err.Error()
}

func excerptSuffix(body string) string {
	if body == "" {
		return ""
	}
	return ": " + body
}

// validProfiles lists the profiles for an error message.
func (a *app) validProfiles() string {
	c, err := a.api()
	if err != nil {
		return "list them with `sbx profiles`"
	}
	ps, err := c.profiles(context.Background())
	if err != nil || len(ps) == 0 {
		return "list them with `sbx profiles`"
	}
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name
	}
	return "valid profiles are " + strings.Join(names, ", ")
}
