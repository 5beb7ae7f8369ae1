// Package sshdconfig writes a sandbox's sshd_config: the pod's init, the
// local provider's sshd mode and the tart provider's guest all run that
// sshd. It is apart from package sandboxinit so a binary that links no
// init (cmd/control, with the tart provider) can write it.
package sshdconfig

import (
	"strconv"
	"strings"

	"github.com/sbxedge/sbx/internal/initproto"
)

// Config is a sandbox's sshd_config: authentication only by user
// certificates from the internal CA, with the certificate principal
// equal to the login name (no AuthorizedPrincipalsFile). The local
// provider's sshd mode and the pod's init both write it.
type Config struct {
	// Listen is the ListenAddress; empty listens on every address (a
	// pod, which exposes only this port). It may carry its own port.
	Listen string
	// Port is the port of a Listen without one; 0 writes none.
	Port    int
	HostKey string // path of the host key
	CAKeys  string // path of the trusted user CA keys
	PidFile string
	// InitCommand, when set, serves the sbx-init subsystem.
	InitCommand string
	// SetEnv are NAME=value pairs set in every session, winning over
	// what a client sends; values are quoted here, names must be plain.
	SetEnv []string
}

func (c Config) String() string {
	var lines []string
	if c.Listen != "" {
		lines = append(lines, "ListenAddress "+c.Listen)
	}
	if c.Port != 0 {
		lines = append(lines, "Port "+strconv.Itoa(c.Port))
	}
	lines = append(lines,
		"HostKey "+c.HostKey,
		"TrustedUserCAKeys "+c.CAKeys,
		"AuthorizedKeysFile none",
		"PubkeyAuthentication yes",
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"UsePAM no",
		// The key files are ours, not a user's home with strict modes.
		"StrictModes no",
		"PermitRootLogin prohibit-password",
		"AllowTcpForwarding yes",
		"GatewayPorts no",
		"X11Forwarding no",
		"PermitUserEnvironment no",
	)
	if len(c.SetEnv) > 0 {
		// One line: sshd keeps the first of repeated keywords.
		kv := make([]string, len(c.SetEnv))
		for i, e := range c.SetEnv {
			kv[i] = sshdQuote(e)
		}
		lines = append(lines, "SetEnv "+strings.Join(kv, " "))
	}
	lines = append(lines,
		"PrintMotd no",
		// Pooled clients multiplex many exec and sftp channels on one connection.
		"MaxSessions 64",
		// Every user's connection arrives from the broker, one upstream
		// connection each, so a burst of logins (50 parallel sessions, a
		// VS Code reconnect) is many concurrent handshakes from one peer.
		// sshd's default 10:30:100 would drop some at random; only CA
		// certificates get in, so a larger budget costs no safety.
		"MaxStartups 256",
		"Subsystem sftp internal-sftp",
		"PidFile "+c.PidFile,
		"LogLevel INFO",
	)
	if c.InitCommand != "" {
		lines = append(lines, "Subsystem "+initproto.Subsystem+" "+c.InitCommand)
	}
	return strings.Join(lines, "\n") + "\n"
}

// sshdQuote quotes s as one sshd_config argument: within double quotes
// sshd takes every byte as it is except a backslash, which escapes a
// quote or another backslash. (Go's quoting would also escape bytes sshd
// then reads literally, such as a non-printable rune.)
func sshdQuote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}
