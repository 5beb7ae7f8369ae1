package lifecycle

import (
	"maps"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// A create's env is set in every process of the sandbox: exec, SSH
// sessions, terminals and services, beside the proxy environment. It
// travels to the sandbox's sshd as SetEnv (quoted), so values are
// printable text: no control characters, no newlines.

const (
	maxEnvVars     = 64
	maxEnvValueLen = 4096
	maxEnvTotal    = 32 << 10
)

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// reservedEnv are the names the sandbox sets itself: its identity, and
// the egress proxy (a create cannot point its tools around the gateway's
// credential by accident). SBX_ is ours as a prefix.
var reservedEnv = []string{"HOME", "USER", "LOGNAME", "SHELL", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"}

// envNameOK reports whether name may be set by a create; why says why not.
func envNameOK(name string) (why string, ok bool) {
	if !envNameRE.MatchString(name) {
		return "must be 1 to 128 letters, digits or '_', not starting with a digit", false
	}
	up := strings.ToUpper(name)
	if strings.HasPrefix(up, "SBX_") || slices.Contains(reservedEnv, up) {
		return "is set by the sandbox itself (reserved: SBX_*, " + strings.Join(reservedEnv, ", ") + ")", false
	}
	return "", true
}

// envValueOK reports whether v can be delivered as an environment value.
func envValueOK(v string) bool {
	return utf8.ValidString(v) && !strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f })
}

// validateEnv checks a create's env.
func validateEnv(env map[string]string) error {
	if len(env) > maxEnvVars {
		return invalid("env", "has %d variables; at most %d are allowed", len(env), maxEnvVars)
	}
	total := 0
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if why, ok := envNameOK(k); !ok {
			return invalid("env", "name %q %s", k, why)
		}
		v := env[k]
		if len(v) > maxEnvValueLen || !envValueOK(v) {
			return invalid("env", "value of %s must be at most %d bytes of printable UTF-8 (no newlines or control characters)", k, maxEnvValueLen)
		}
		total += len(k) + len(v)
	}
	if total > maxEnvTotal {
		return invalid("env", "is %d bytes of names and values; at most %d are allowed", total, maxEnvTotal)
	}
	return nil
}

// envPairs is env as NAME=value pairs in name order.
func envPairs(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}
