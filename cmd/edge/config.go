package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/sbxedge/sbx/cmd/internal/flagenv"
	"github.com/sbxedge/sbx/edge"
	"github.com/sbxedge/sbx/edge/preview"
	"github.com/sbxedge/sbx/edge/preview/previewtls/rfc2136"
	"github.com/sbxedge/sbx/internal/egresspolicy"
	"github.com/sbxedge/sbx/internal/httplimit"
)

// parseConfig maps args and SBX_* variables onto edge.Config, here and
// nowhere else; a flag wins over its variable. Secrets come from files
// (mounted Secrets) or variables, never from flag values.
func parseConfig(args []string, getenv func(string) string) (edge.Config, slog.Level, error) {
	env := flagenv.Env(getenv)
	c := edge.DefaultConfig()
	p := &c.Preview
	var (
		secretFile, oidcSecretFile, sessionKeyFile, tsigSecretFile string
		oidc                                                       preview.OIDCConfig
		dns                                                        rfc2136.Provider
		level                                                      slog.Level
	)
	var errs []error // bad defaults from the environment
	fs := flag.NewFlagSet("edge", flag.ContinueOnError)
	fs.StringVar(&c.SSHAddr, "ssh-addr", env("SBX_EDGE_SSH_ADDR", ":2222"), "SSH broker listen address")
	fs.StringVar(&c.HTTPAddr, "http-addr", env("SBX_EDGE_HTTP_ADDR", ":9090"), "health (/healthz, /readyz) listen address (empty: off)")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", env("SBX_EDGE_METRICS_ADDR", "127.0.0.1:9092"), "GET /metrics listen address: metrics name sandboxes, keep it private (empty: off)")
	fs.StringVar(&c.ControlURL, "control-url", env("SBX_CONTROL_URL", ""), "control's internal API base URL")
	fs.StringVar(&secretFile, "internal-secret-file", env("SBX_INTERNAL_SECRET_FILE", ""), "file holding the internal API secret (default: $SBX_INTERNAL_SECRET)")
	fs.StringVar(&c.HostKeyDir, "host-key-dir", env("SBX_EDGE_HOST_KEY_DIR", ""), "directory of the broker's shared ssh_host_*_key files")
	fs.StringVar(&c.CAKeyFile, "ca-key-file", env("SBX_CA_KEY_FILE", ""), "the internal user CA's private key, shared with control")
	errs = append(errs, durationFlag(fs, &c.Drain, "ssh-drain", env("SBX_EDGE_SSH_DRAIN", "30s"), "how long SSH sessions may finish on shutdown"))
	errs = append(errs, durationFlag(fs, &c.ClientAlive, "client-alive-interval", env("SBX_EDGE_CLIENT_ALIVE", "30s"), "keepalive interval towards SSH clients (0: off)"))
	errs = append(errs, durationFlag(fs, &c.UpstreamAlive, "upstream-alive-interval", env("SBX_EDGE_UPSTREAM_ALIVE", "30s"), "keepalive interval towards sandboxes (0: off)"))
	errs = append(errs, durationFlag(fs, &c.UpstreamTimeout, "upstream-timeout", env("SBX_EDGE_UPSTREAM_TIMEOUT", "10s"), "bound on the dial and SSH handshake to a sandbox"))
	errs = append(errs, intFlag(fs, &c.SSHMaxConns, "ssh-max-conns", env("SBX_EDGE_SSH_MAX_CONNS", fmt.Sprint(edge.DefaultSSHMaxConns)), "most SSH client connections held at once; beyond it new ones wait in the kernel's backlog, so no flood takes every file descriptor"))
	errs = append(errs, intFlag(fs, &p.MaxConns, "preview-max-conns", env("SBX_PREVIEW_MAX_CONNS", fmt.Sprint(edge.DefaultPreviewMaxConns)), "most preview connections held at once (each proxied one costs a second descriptor upstream)"))
	errs = append(errs, durationFlag(fs, &p.BodyTimeout, "preview-body-timeout", env("SBX_PREVIEW_BODY_TIMEOUT", httplimit.DefaultBodyTimeout.String()), "how long a preview or egress-gateway request body may take to start or stall; before its sender authenticates it must also average 1 KiB/s (a body that never arrives is cut after this)"))
	errs = append(errs, level.UnmarshalText([]byte(env("SBX_LOG_LEVEL", "info"))))
	fs.TextVar(&level, "log-level", level, "debug, info, warn or error")
	fs.StringVar(&c.RedisURL, "redis-url", "", "Redis for activity, preview invalidations, login tickets, certificates and ACME locks, shared with control and other replicas (default: $SBX_REDIS_URL)")
	fs.StringVar(&c.ActivityPrefix, "activity-prefix", env("SBX_ACTIVITY_PREFIX", "sbx:activity:"), "prefix of the activity keys in --redis-url's Redis (must match control's --activity-prefix)")
	fs.BoolVar(&c.NoActivity, "no-activity", env("SBX_EDGE_NO_ACTIVITY", "") == "1", "record no activity (only when control runs without idle offload)")

	fs.StringVar(&p.Addr, "preview-addr", env("SBX_PREVIEW_ADDR", ""), "preview proxy listen address (empty: previews off)")
	fs.BoolVar(&p.PlainHTTP, "preview-plain-http", env("SBX_PREVIEW_PLAIN_HTTP", "") == "1", "serve previews over plain HTTP/h2c (TLS terminated in front)")
	fs.StringVar(&p.HTTPAddr, "preview-http-addr", env("SBX_PREVIEW_HTTP_ADDR", ":80"), "ACME HTTP-01 and redirect-to-HTTPS listener (TLS mode)")
	fs.StringVar(&p.Domain, "preview-domain", env("SBX_PREVIEW_DOMAIN", ""), "preview base domain")
	fs.IntVar(&p.PublicPort, "preview-public-port", 0, "port browsers use, when not the scheme's default")
	fs.StringVar(&oidc.Issuer, "oidc-issuer", env("SBX_OIDC_ISSUER", ""), "OIDC issuer URL for preview sign-in")
	fs.StringVar(&oidc.ClientID, "oidc-client-id", env("SBX_OIDC_CLIENT_ID", ""), "OIDC client id")
	fs.StringVar(&oidcSecretFile, "oidc-client-secret-file", env("SBX_OIDC_CLIENT_SECRET_FILE", ""), "file holding the OIDC client secret (default: $SBX_OIDC_CLIENT_SECRET)")
	fs.StringVar(&sessionKeyFile, "preview-session-key-file", env("SBX_PREVIEW_SESSION_KEY_FILE", ""), "file holding the cookie-signing key (at least 32 bytes), shared by replicas")
	fs.BoolVar(&p.ReverseProxyOnly, "preview-reverse-proxy-only", env("SBX_PREVIEW_REVERSE_PROXY_ONLY", "") == "1", "send every preview request through httputil.ReverseProxy, not the lean HTTP/1.1 relay (a way back)")
	fs.BoolVar(&p.SSHOnly, "preview-ssh-only", env("SBX_PREVIEW_SSH_ONLY", "") == "1", "reach sandbox ports over SSH only, not through their port forwarders (plain TCP inside the cluster)")
	fs.DurationVar(&p.RouteTTL, "preview-route-ttl", p.RouteTTL, "how long resolved preview routes are cached")
	fs.StringVar(&p.ACMECA, "acme-ca", env("SBX_ACME_CA", ""), "ACME directory URL (default: Let's Encrypt)")
	fs.StringVar(&p.ACMEEmail, "acme-email", env("SBX_ACME_EMAIL", ""), "ACME account contact")
	fs.StringVar(&dns.Server, "acme-dns-server", env("SBX_ACME_DNS_SERVER", ""), "DNS primary (host:port) taking RFC 2136 updates: one wildcard certificate over DNS-01 instead of on-demand HTTP-01")
	fs.StringVar(&dns.KeyName, "acme-dns-tsig-key", env("SBX_ACME_DNS_TSIG_KEY", ""), "TSIG key name for --acme-dns-server")
	fs.StringVar(&dns.KeyAlgorithm, "acme-dns-tsig-algorithm", env("SBX_ACME_DNS_TSIG_ALGORITHM", "hmac-sha256"), "TSIG algorithm: hmac-sha256, hmac-sha384 or hmac-sha512")
	fs.StringVar(&tsigSecretFile, "acme-dns-tsig-secret-file", env("SBX_ACME_DNS_TSIG_SECRET_FILE", ""), "file holding the base64 TSIG secret (default: $SBX_ACME_DNS_TSIG_SECRET)")
	eg := &c.Egress
	fs.StringVar(&eg.Addr, "egress-listen", env("SBX_EDGE_EGRESS_ADDR", ""), "egress gateway (HTTP forward proxy for sandboxes) listen address (empty: off)")
	fs.Var((*egresspolicy.PrefixList)(&eg.Trust), "egress-trust", "a range (CIDR or address) the egress gateway may reach though private, for a known upstream; repeatable (also $SBX_EDGE_EGRESS_TRUST, comma-separated)")
	fs.Var((*egresspolicy.PrefixList)(&eg.Cluster), "egress-cluster-range", "the cluster's pod or service range, refused by the egress gateway; repeatable (also $SBX_EDGE_EGRESS_CLUSTER_RANGES)")
	fs.Var((*egresspolicy.AddrPortList)(&eg.Own), "egress-own", "a listener of the product (API, Postgres, Redis: ip:port) the egress gateway never reaches, even in a trusted range; repeatable (also $SBX_EDGE_EGRESS_OWN)")
	if err := fs.Parse(args); err != nil {
		return c, 0, err
	}
	errs = append(errs, egressEnv(fs, getenv))
	eg.BodyTimeout = p.BodyTimeout
	// Not a flag default: -help would print it (a URL's password).
	if err := flagenv.Unshown(fs, getenv, map[string]string{"redis-url": "SBX_REDIS_URL"}); err != nil {
		return c, 0, err
	}
	if fs.NArg() > 0 {
		return c, 0, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, r := range []struct{ flag, value string }{
		{"--ssh-addr", c.SSHAddr}, {"--control-url (SBX_CONTROL_URL)", c.ControlURL},
		{"--host-key-dir (SBX_EDGE_HOST_KEY_DIR)", c.HostKeyDir}, {"--ca-key-file (SBX_CA_KEY_FILE)", c.CAKeyFile},
	} {
		if r.value == "" {
			errs = append(errs, fmt.Errorf("%s is required", r.flag))
		}
	}
	if c.RedisURL == "" && !c.NoActivity {
		errs = append(errs, errors.New("--redis-url (SBX_REDIS_URL) is required: control's idle detector reads activity from it "+
			"and would suspend sandboxes in use through this edge; pass --no-activity only when control runs without idle offload"))
	}
	secret, err := flagenv.Secret("--internal-secret-file", secretFile, getenv("SBX_INTERNAL_SECRET"))
	c.InternalSecret = secret
	if err == nil && secret == "" {
		err = errors.New("the internal API secret is required: --internal-secret-file or SBX_INTERNAL_SECRET")
	}
	errs = append(errs, err)
	if p.Addr != "" {
		errs = append(errs, previewSecrets(p, &oidc, &dns, oidcSecretFile, sessionKeyFile, tsigSecretFile, getenv))
		if c.RedisURL == "" && !p.PlainHTTP {
			errs = append(errs, errors.New("--redis-url is required for TLS: certificates and ACME locks are shared by replicas"))
		}
	}
	return c, level, errors.Join(errs...)
}

// egressEnv fills the egress gateway's list flags that were not given
// from their variables (comma-separated): a flag, given once or more,
// wins over its variable, as everywhere.
func egressEnv(fs *flag.FlagSet, getenv func(string) string) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	for _, v := range []struct{ flag, env string }{
		{"egress-trust", "SBX_EDGE_EGRESS_TRUST"},
		{"egress-cluster-range", "SBX_EDGE_EGRESS_CLUSTER_RANGES"},
		{"egress-own", "SBX_EDGE_EGRESS_OWN"},
	} {
		if given[v.flag] {
			continue
		}
		if err := fs.Lookup(v.flag).Value.Set(getenv(v.env)); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", v.env, err))
		}
	}
	return errors.Join(errs...)
}

// previewSecrets reads the preview's secrets and refuses a proxy without
// a real OIDC issuer: the dev sign-in exists only in sbx dev.
func previewSecrets(p *edge.PreviewConfig, oidc *preview.OIDCConfig, dns *rfc2136.Provider, oidcFile, keyFile, tsigFile string, getenv func(string) string) error {
	var errs []error
	if p.Domain == "" {
		errs = append(errs, errors.New("--preview-domain (SBX_PREVIEW_DOMAIN) is required with --preview-addr"))
	}
	if oidc.Issuer == "" || oidc.ClientID == "" {
		errs = append(errs, errors.New("--oidc-issuer and --oidc-client-id are required with --preview-addr: private previews need a real identity provider"))
	}
	var err error
	oidc.ClientSecret, err = flagenv.Secret("--oidc-client-secret-file", oidcFile, getenv("SBX_OIDC_CLIENT_SECRET"))
	p.OIDC = oidc
	errs = append(errs, err)
	key, err := flagenv.Secret("--preview-session-key-file", keyFile, "")
	if p.SessionKey = []byte(key); err == nil && len(key) < 32 {
		err = errors.New("--preview-session-key-file must hold at least 32 bytes")
	}
	errs = append(errs, err)
	if dns.Server != "" {
		dns.Secret, err = flagenv.Secret("--acme-dns-tsig-secret-file", tsigFile, getenv("SBX_ACME_DNS_TSIG_SECRET"))
		errs = append(errs, err)
		if p.PlainHTTP {
			errs = append(errs, errors.New("--acme-dns-server needs TLS: it makes no sense with --preview-plain-http"))
		}
		if err := dns.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("--acme-dns-server: %w (--acme-dns-tsig-key, --acme-dns-tsig-secret-file)", err))
		}
		p.DNS01 = dns
	}
	return errors.Join(errs...)
}

// durationFlag is fs.DurationVar with a default given as text (from the
// environment); it returns the default's parse error.
func durationFlag(fs *flag.FlagSet, d *time.Duration, name, def, usage string) error {
	var err error
	if *d, err = time.ParseDuration(def); err != nil {
		err = fmt.Errorf("--%s: %w", name, err)
	}
	fs.DurationVar(d, name, *d, usage)
	return err
}

// intFlag is durationFlag for a count.
func intFlag(fs *flag.FlagSet, n *int, name, def, usage string) error {
	var err error
	if *n, err = strconv.Atoi(def); err != nil {
		err = fmt.Errorf("--%s: %w", name, err)
	}
	fs.IntVar(n, name, *n, usage)
	return err
}
