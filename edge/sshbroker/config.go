package sshbroker

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/internal/connlog"
)

// CertSigner mints the short-lived user certificate the broker presents to a
// sandbox's sshd. *sshca.CA satisfies it.
type CertSigner interface {
	UserSigner(principal, keyID string, ttl time.Duration) (ssh.Signer, error)
}

// Config holds the broker's dependencies and limits. Build it with
// DefaultConfig and override fields; New calls Validate.
type Config struct {
	// HostKeys are the broker's own host keys, shared by every edge replica
	// so clients never see a key change (see LoadOrCreateHostKeys).
	HostKeys []ssh.Signer
	// Authorizer maps (username, key fingerprint) to a Route.
	Authorizer Authorizer
	// CA signs the certificate for the upstream leg.
	CA CertSigner
	// Activity is told about bytes and open connections. Nil means no-op.
	Activity Activity
	// Waker wakes a suspended sandbox for a key holder who connects to
	// it. Nil means such connections are refused as not ready.
	Waker Waker
	// WakeTimeout bounds how long a connection waits for its sandbox to
	// wake, on top of HandshakeTimeout. Default 60s.
	WakeTimeout time.Duration
	// Connections records each client connection in the connection log
	// (its channels' kinds, the client's kind, bytes). Nil records
	// nothing.
	Connections *connlog.Recorder
	// Registry receives the broker's metrics. Nil means unregistered.
	Registry prometheus.Registerer
	// Logger is the parent of every per-connection logger. Nil means
	// slog.Default().
	Logger *slog.Logger

	// HandshakeTimeout bounds everything before the client is
	// authenticated and the upstream is connected: key exchange, auth and
	// the upstream dial. Default 30s: generous for a human picking a key,
	// short enough that idle half-open sockets do not pile up. Once the
	// client proved its key, the deadline is moved out to leave the
	// upstream dial its own UpstreamDialTimeout.
	HandshakeTimeout time.Duration
	// UpstreamDialTimeout bounds the TCP dial plus SSH handshake to the
	// sandbox, however much of HandshakeTimeout is left. Default 10s.
	UpstreamDialTimeout time.Duration
	// UpstreamCertTTL is the lifetime of the certificate presented to the
	// sandbox. sshd only checks it at login, so it can be short. Default 5m.
	UpstreamCertTTL time.Duration
	// MaxAuthTries is the number of failed auth attempts per connection.
	// Default 6, like OpenSSH.
	MaxAuthTries int
	// FailedAuthRate and FailedAuthBurst form the token bucket of failed
	// authentications per credential: source address, user and offered
	// key. A credential that has spent its bucket is refused until it
	// refills, and nobody else behind the same address is affected.
	// Defaults: one failure per second, burst 30.
	FailedAuthRate  float64
	FailedAuthBurst int
	// SourceFailedAuthRate and SourceFailedAuthBurst form the looser
	// ceiling per source address (IPv6: per /64) that every failure also
	// spends; a source that has spent it is disconnected before key
	// exchange until it refills, whatever key it brings. It stops floods
	// that rotate users or keys. Defaults: 10 failures per second, burst
	// 300.
	SourceFailedAuthRate  float64
	SourceFailedAuthBurst int
	// MaxChannelsPerConn caps open channels (both directions) on one client
	// connection. Default 256: VS Code opens a few dozen forwards at most.
	MaxChannelsPerConn int
	// MaxConnsPerSandbox caps concurrent client connections to one sandbox.
	// Default 128.
	MaxConnsPerSandbox int
	// DrainPeriod is how long Shutdown lets open connections finish before
	// closing them with a message. Default 30s.
	DrainPeriod time.Duration
	// AuthCacheTTL is how long an accepted (username, key) answer is
	// reused without asking the Authorizer again; never past the
	// credential's expiry. Zero disables the cache. Default 10s: a burst of
	// connections asks control once, and a revoked credential stops
	// admitting new connections soon (Disconnect forgets at once).
	AuthCacheTTL time.Duration
	// AuthRefusalTTL is how long a refusal about the credential itself
	// (unknown, expired, ended, other sandbox) is reused. "Not ready" and
	// control faults are never cached. Default 2s.
	AuthRefusalTTL time.Duration
	// AuthCacheSize bounds the cached answers. Default 4096.
	AuthCacheSize int

	// ClientAliveInterval is how often the broker sends a keepalive to a
	// quiet client; ClientAliveCountMax unanswered intervals end the
	// connection, so dead peers behind vanished NATs do not hold a slot
	// (and the sandbox awake) forever. The traffic also keeps idle NAT
	// and load-balancer mappings open. Zero disables. Defaults 30s and 3.
	ClientAliveInterval time.Duration
	ClientAliveCountMax int
	// UpstreamAliveInterval and UpstreamAliveCountMax do the same towards
	// the sandbox, so a pod that vanished without a FIN is noticed and the
	// client is told. Zero disables. Defaults 30s and 3.
	UpstreamAliveInterval time.Duration
	UpstreamAliveCountMax int

	// UpstreamCiphers is the cipher preference on the broker-to-sandbox
	// leg. Nil keeps x/crypto/ssh's order, which puts AES-GCM first:
	// hardware-accelerated on every server CPU we run on, and about half
	// chacha20-poly1305's cost per byte there (see loadtest). The client
	// leg is the client's choice.
	UpstreamCiphers []string

	// ServerVersion is the SSH identification string. Default
	// "SSH-2.0-sbx-broker".
	ServerVersion string
}

// DefaultConfig returns a Config with every limit at its documented default.
func DefaultConfig() Config {
	return Config{
		HandshakeTimeout:    30 * time.Second,
		UpstreamDialTimeout: 10 * time.Second,
		UpstreamCertTTL:     5 * time.Minute,
		MaxAuthTries:        6,
		FailedAuthRate:      1,
		FailedAuthBurst:     30,

		SourceFailedAuthRate:  10,
		SourceFailedAuthBurst: 300,
		MaxChannelsPerConn:    256,
		MaxConnsPerSandbox:    128,
		DrainPeriod:           30 * time.Second,
		WakeTimeout:           60 * time.Second,
		ServerVersion:         "SSH-2.0-sbx-broker",

		AuthCacheTTL:   10 * time.Second,
		AuthRefusalTTL: 2 * time.Second,
		AuthCacheSize:  4096,

		ClientAliveInterval:   30 * time.Second,
		ClientAliveCountMax:   3,
		UpstreamAliveInterval: 30 * time.Second,
		UpstreamAliveCountMax: 3,
	}
}

// Validate names every invalid field. It has no side effects.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, why string) { errs = append(errs, fmt.Errorf("sshbroker config: %s %s", field, why)) }
	if len(c.HostKeys) == 0 {
		bad("HostKeys", "is empty")
	}
	if c.Authorizer == nil {
		bad("Authorizer", "is nil")
	}
	if c.CA == nil {
		bad("CA", "is nil")
	}
	// Every limit below must be set: zero would refuse all traffic or
	// none. Durations and counts share one table, as float64.
	positive := []struct {
		name string
		v    float64
	}{
		{"HandshakeTimeout", float64(c.HandshakeTimeout)},
		{"WakeTimeout", float64(c.WakeTimeout)},
		{"UpstreamDialTimeout", float64(c.UpstreamDialTimeout)},
		{"UpstreamCertTTL", float64(c.UpstreamCertTTL)},
		{"MaxAuthTries", float64(c.MaxAuthTries)},
		{"FailedAuthRate", c.FailedAuthRate},
		{"FailedAuthBurst", float64(c.FailedAuthBurst)},
		{"SourceFailedAuthRate", c.SourceFailedAuthRate},
		{"SourceFailedAuthBurst", float64(c.SourceFailedAuthBurst)},
		{"MaxChannelsPerConn", float64(c.MaxChannelsPerConn)},
		{"MaxConnsPerSandbox", float64(c.MaxConnsPerSandbox)},
	}
	for _, p := range positive {
		if p.v <= 0 {
			bad(p.name, "must be positive")
		}
	}
	nonNegative := []struct {
		name string
		d    time.Duration
	}{
		{"DrainPeriod", c.DrainPeriod},
		{"AuthCacheTTL", c.AuthCacheTTL},
		{"AuthRefusalTTL", c.AuthRefusalTTL},
		{"ClientAliveInterval", c.ClientAliveInterval},
		{"UpstreamAliveInterval", c.UpstreamAliveInterval},
	}
	for _, p := range nonNegative {
		if p.d < 0 {
			bad(p.name, "must not be negative")
		}
	}
	// A count of zero with its feature on would end every connection at
	// the first interval or cache nothing.
	needs := []struct {
		on   bool
		name string
		v    int
		when string
	}{
		{c.AuthCacheTTL > 0 || c.AuthRefusalTTL > 0, "AuthCacheSize", c.AuthCacheSize, "the auth cache is on"},
		{c.ClientAliveInterval > 0, "ClientAliveCountMax", c.ClientAliveCountMax, "ClientAliveInterval is set"},
		{c.UpstreamAliveInterval > 0, "UpstreamAliveCountMax", c.UpstreamAliveCountMax, "UpstreamAliveInterval is set"},
	}
	for _, n := range needs {
		if n.on && n.v <= 0 {
			bad(n.name, "must be positive when "+n.when)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return nil
}
