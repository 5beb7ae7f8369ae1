package main

// Which token goes to which API. A saved token is sent only to the API it
// was saved for, the way gh, kubectl and docker's credential stores key
// credentials by host: --api or SBX_API naming another server (a typo, a
// proxy, someone else's listener) must not receive it. SBX_TOKEN is the
// exception: it is given for this call, so it goes to the API named with it.

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// errNoToken is exit code 4. noTokenError says which API lacks a token.
var errNoToken = errors.New("no API token")

// apiKey is the form API URLs are compared and saved in: lower-case scheme
// and host, the port unless it is the scheme's default, the path without
// a trailing slash; never user info, query or fragment. ok is false for
// anything but an http or https URL with a host.
func apiKey(raw string) (key string, ok bool) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return "", false
	}
	scheme := strings.ToLower(u.Scheme)
	host := strings.ToLower(u.Hostname())
	if (scheme != "http" && scheme != "https") || host == "" {
		return "", false
	}
	if host == "localhost" {
		// apiURL connects to 127.0.0.1 for localhost, so both name one
		// socket (::1 is another and keeps its own key).
		host = "127.0.0.1"
	}
	port := u.Port()
	if (scheme == "http" && port == "80") || (scheme == "https" && port == "443") {
		port = ""
	}
	switch {
	case port != "":
		host = net.JoinHostPort(host, port)
	case strings.Contains(host, ":"):
		host = "[" + host + "]" // IPv6
	}
	return scheme + "://" + host + strings.TrimRight(u.EscapedPath(), "/"), true
}

// devTokenFile and devAPIFile are where sbx dev leaves its account token
// and the URL of the API it serves, the one API the CLI sends that token to.
func devTokenFile(dataDir string) string { return filepath.Join(dataDir, "token") }
func devAPIFile(dataDir string) string   { return filepath.Join(dataDir, "api_url") }

// writeDevAPI records the API URL sbx dev serves beside its token file.
func writeDevAPI(dataDir, apiURL string) error {
	return writeFileAtomic(devAPIFile(dataDir), []byte(apiURL+"\n"), 0o600)
}

// devCredential is the token a local sbx dev wrote and the API it is for
// (apiKey form; empty when no URL is recorded, as an sbx dev before the
// record wrote it: such a token is sent nowhere).
type devCredential struct {
	file, token, api string
}

func readDevCredential() devCredential {
	d := devCredential{file: devTokenFile(defaultDataDir())}
	b, err := os.ReadFile(d.file)
	if err != nil {
		return d
	}
	d.token = strings.TrimSpace(string(b))
	if b, err := os.ReadFile(devAPIFile(defaultDataDir())); err == nil {
		d.api, _ = apiKey(string(b))
	}
	return d
}

// token finds the account token for the API in use: SBX_TOKEN, else the
// token sbx login saved for this API, else the token a local sbx dev wrote
// if this is the API it serves. It is never a flag, so it cannot end up in
// shell history, ps output or a help text.
func (a *app) token() (string, error) {
	if v := strings.TrimSpace(os.Getenv("SBX_TOKEN")); v != "" {
		return v, nil
	}
	return a.storedToken()
}

// storedToken is token without SBX_TOKEN: what a later sbx, started
// without this shell's environment, finds for the API in use.
func (a *app) storedToken() (string, error) {
	base := a.apiURL()
	key, ok := apiKey(base)
	c, err := readConfig()
	if err != nil {
		return "", err
	}
	dev := readDevCredential()
	if ok {
		if tok := c.Tokens[key]; tok != "" {
			return tok, nil
		}
		if dev.token != "" && dev.api == key {
			return dev.token, nil
		}
	}
	e := &noTokenError{api: key, badURL: !ok, dev: dev}
	if !ok {
		e.api = redactedURL(base)
	}
	for k := range c.Tokens {
		e.saved = append(e.saved, k)
	}
	slices.Sort(e.saved)
	return "", e
}

// noTokenError is no token for the API in use, with what the CLI does hold
// (API URLs only, never a token) and how to get one.
type noTokenError struct {
	api    string
	badURL bool     // api is not an http(s) URL
	saved  []string // APIs sbx login saved tokens for
	dev    devCredential
}

func (e *noTokenError) Is(target error) bool { return target == errNoToken }

func (e *noTokenError) Error() string {
	if e.badURL {
		return fmt.Sprintf("no API token: the API URL %q (--api, SBX_API or the config file) is not an http:// or https:// URL with a host", e.api)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "no API token for %s", e.api)
	var held []string
	if len(e.saved) > 0 {
		held = append(held, "sbx login saved tokens for "+strings.Join(e.saved, ", ")+" only")
	}
	switch {
	case e.dev.token != "" && e.dev.api != "":
		held = append(held, fmt.Sprintf("the sbx dev token (%s) is for %s only", e.dev.file, e.dev.api))
	case e.dev.token != "":
		held = append(held, fmt.Sprintf("the sbx dev token (%s) records no API URL, so it is sent nowhere: restart sbx dev to record it", e.dev.file))
	}
	if len(held) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(held, "; "))
	}
	fmt.Fprintf(&b, ": run `sbx login --api %s` and give it that API's token on stdin, or set SBX_TOKEN", e.api)
	if e.dev.token == "" {
		b.WriteString(", or start `sbx dev` (it writes ~/.sbx/dev/token)")
	}
	return b.String()
}

// redactedURL is raw for a message, without a password.
func redactedURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		// Shown as typed unless it may carry user info (a password).
		if strings.Contains(raw, "@") {
			return "(unparsable)"
		}
		return strconv.Quote(raw)
	}
	return u.Redacted()
}
