// Package hosts reads the macOS hosts file: the Macs a control replica
// runs macOS sandboxes on (each behind its host agent, cmd/sbx-macd),
// their slots and shapes, and the macOS profiles' templates. cmd/control
// opens a tart provider across them (--macos-hosts), and `sbx admin
// templates` reads the same file to reach the agents.
//
//	hosts:
//	  - name: mini-1
//	    agent: https://mini-1.lan:7443
//	    tokenFile: /etc/sbx/macd-token   # default: control's internal-API secret
//	    caFile: /etc/sbx/macd-ca.pem     # the agent's TLS CA (default: the system's)
//	    slots: 2                         # default and most: 2 (Apple's licence)
//	    maxMemoryMB: 16384
//	    maxCPU: 8
//	templates:
//	  tuist-macos-16-large:
//	    baseImage: ghcr.io/cirruslabs/macos-sequoia-xcode:latest
//	    setupScript: |
//	      mkdir -p "$HOME/workspace"
//	suspendable: true
//
// A credential is only ever a file's path: the file never holds a token.
package hosts

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/sbxedge/sbx/control/provider/tart"
	"github.com/sbxedge/sbx/control/provider/tart/agent"
)

// MaxSlots is the most macOS VMs Apple's licence allows on one host.
const MaxSlots = 2

// File is the hosts file.
type File struct {
	Hosts []Host `json:"hosts"`
	// Templates are per macOS profile; a profile with none clones its
	// image (the profile's Image) with no setup script.
	Templates        map[string]Template `json:"templates,omitempty"`
	DefaultBaseImage string              `json:"defaultBaseImage,omitempty"`
	// Suspendable runs VMs with --suspendable, so idle macOS sandboxes
	// can be suspended (hosts on macOS 14+ with tart 1.8+; one that is
	// not makes the pool exempt from idle suspend).
	Suspendable bool `json:"suspendable,omitempty"`
}

// Host is one Mac behind its agent.
type Host struct {
	Name  string `json:"name"`
	Agent string `json:"agent"`
	// TokenFile holds the agent's bearer token (its SBX_MACD_TOKEN);
	// empty: control's internal-API secret. Relative to the hosts file.
	TokenFile string `json:"tokenFile,omitempty"`
	// CAFile verifies an https agent signed by a private CA.
	CAFile      string  `json:"caFile,omitempty"`
	Slots       int     `json:"slots,omitempty"`
	MaxMemoryMB int     `json:"maxMemoryMB,omitempty"`
	MaxCPU      float64 `json:"maxCPU,omitempty"`
}

// Template is a profile's base image and setup script.
type Template struct {
	BaseImage   string `json:"baseImage"`
	SetupScript string `json:"setupScript,omitempty"`
}

var namePattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$`)

// Load reads and checks the hosts file at path (YAML or JSON). Errors
// name the field and what to write instead.
func Load(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f File
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		if strings.Contains(err.Error(), `"token"`) {
			return nil, fmt.Errorf("%s: a token is never written in the hosts file: put it in a file and name that with tokenFile (%w)", path, err)
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	dir := filepath.Dir(path)
	if err := f.check(dir); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &f, nil
}

func (f *File) check(dir string) error {
	if len(f.Hosts) == 0 {
		return errors.New("hosts: at least one is required")
	}
	seen := map[string]bool{}
	for i := range f.Hosts {
		h := &f.Hosts[i]
		field := fmt.Sprintf("hosts[%d]", i)
		if !namePattern.MatchString(h.Name) {
			return fmt.Errorf("%s.name %q: want a DNS-style name such as mini-1", field, h.Name)
		}
		if seen[h.Name] {
			return fmt.Errorf("%s.name %q: listed twice", field, h.Name)
		}
		seen[h.Name] = true
		u, err := url.Parse(h.Agent)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			return fmt.Errorf("%s.agent %q: want the agent's http(s)://HOST:PORT (sbx-macd --listen)", field, h.Agent)
		}
		switch {
		case h.Slots == 0:
			h.Slots = MaxSlots
		case h.Slots < 0 || h.Slots > MaxSlots:
			return fmt.Errorf("%s.slots %d: Apple's licence allows 1 to %d macOS VMs per host", field, h.Slots, MaxSlots)
		}
		if h.MaxMemoryMB < 0 || h.MaxCPU < 0 {
			return fmt.Errorf("%s: maxMemoryMB and maxCPU cannot be negative", field)
		}
		for _, p := range []*string{&h.TokenFile, &h.CAFile} {
			if *p != "" && !filepath.IsAbs(*p) {
				*p = filepath.Join(dir, *p)
			}
		}
	}
	for name, t := range f.Templates {
		if t.BaseImage == "" {
			return fmt.Errorf("templates.%s.baseImage: required (an OCI reference such as ghcr.io/cirruslabs/macos-sequoia-base:latest)", name)
		}
	}
	return nil
}

// Insecure reports whether a host's agent is plain HTTP off this machine:
// its token would cross the network in clear.
func (h Host) Insecure() bool {
	u, err := url.Parse(h.Agent)
	if err != nil || u.Scheme == "https" {
		return false
	}
	ip := net.ParseIP(u.Hostname())
	return u.Hostname() != "localhost" && (ip == nil || !ip.IsLoopback())
}

// Client is h's agent as a tart Driver; defaultToken is used when h has
// no TokenFile.
func (h Host) Client(defaultToken string) (*agent.Client, error) {
	token := defaultToken
	if h.TokenFile != "" {
		b, err := os.ReadFile(h.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("host %s: tokenFile: %w", h.Name, err)
		}
		token = strings.TrimSpace(string(b))
	}
	if len(token) < 16 {
		return nil, fmt.Errorf("host %s: the agent's token must be 16 characters or more (tokenFile, or control's internal-API secret)", h.Name)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if h.CAFile != "" {
		pem, err := os.ReadFile(h.CAFile)
		if err != nil {
			return nil, fmt.Errorf("host %s: caFile: %w", h.Name, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("host %s: caFile %s holds no PEM certificate", h.Name, h.CAFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &agent.Client{BaseURL: h.Agent, Token: token, HTTP: &http.Client{Transport: tr}}, nil
}

// Config is the tart provider's configuration across f's hosts.
func (f *File) Config(defaultToken string, logger *slog.Logger) (tart.Config, error) {
	cfg := tart.Config{DefaultBaseImage: f.DefaultBaseImage, Suspendable: f.Suspendable, Logger: logger, Templates: map[string]tart.Template{}}
	for name, t := range f.Templates {
		cfg.Templates[name] = tart.Template{BaseImage: t.BaseImage, SetupScript: t.SetupScript}
	}
	for _, h := range f.Hosts {
		c, err := h.Client(defaultToken)
		if err != nil {
			return cfg, err
		}
		if h.Insecure() && logger != nil {
			logger.Warn("macOS host agent over plain HTTP off this machine: its token crosses the network in clear; serve it with --tls-cert/--tls-key and use https", "host", h.Name)
		}
		cfg.Hosts = append(cfg.Hosts, tart.Host{Name: h.Name, Driver: c, Slots: h.Slots, MaxMemoryMB: h.MaxMemoryMB, MaxCPU: h.MaxCPU})
	}
	return cfg, nil
}

// Open builds the tart provider across f's hosts and runs their
// preflight (tart, macOS version: a host that cannot suspend makes the
// pool exempt from idle suspend). A host that does not answer is logged,
// not fatal: one Mac down must not keep a replica from starting.
// Suspended VMs go to object storage only through the agents (their own
// --s3-endpoint): control never carries a bundle.
func (f *File) Open(ctx context.Context, defaultToken string, logger *slog.Logger) (*tart.Provider, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg, err := f.Config(defaultToken, logger)
	if err != nil {
		return nil, err
	}
	p, err := tart.New(cfg)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := p.Preflight(pctx, 0); err != nil {
		logger.Warn("macOS hosts preflight", "err", err)
	}
	return p, nil
}
