package initproto

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// EnvFile is the key of the sandbox's environment in the mounted Secret:
// a JSON array of "NAME=value" strings (provider.Spec.Env). The init sets
// it in every SSH session (sshd's SetEnv: exec, shells, terminals, the
// sftp and init subsystems) and in every service it starts. It lives in
// the Secret, not in the pod spec, because it may carry secrets (the
// egress proxy credential, a create's secrets) that must not show in
// the pod object, and because a warm pod boots before it is known: the
// Secret is replaced when the pod is claimed, and the init reinstalls.
const EnvFile = "env.json"

// envPairRE is what one entry may be. sshd_config can carry any byte of
// a value inside double quotes except a newline (a config line ends
// there) and NUL; control characters are refused altogether, as the
// create API refuses them (control/lifecycle env.go), so nothing a
// terminal would interpret reaches a session's environment either.
var envPairRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=[^\x00-\x1f\x7f]*$`)

// CheckEnv reports the first entry of env that cannot be delivered, or a
// name given twice. Errors name the variable, never its value: a value
// may be a secret, and these errors are logged.
func CheckEnv(env []string) error {
	seen := make(map[string]bool, len(env))
	for i, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !envPairRE.MatchString(kv) {
			if !ValidEnvName(name) {
				return fmt.Errorf("env entry %d: want NAME=value with a name of letters, digits and '_'", i)
			}
			return fmt.Errorf("env %s: the value holds a control character (a newline, say), which cannot be delivered", name)
		}
		if seen[name] {
			return fmt.Errorf("env %s: set twice", name)
		}
		seen[name] = true
	}
	return nil
}

// ParseEnv decodes and checks an EnvFile.
func ParseEnv(b []byte) ([]string, error) {
	var env []string
	if err := json.Unmarshal(b, &env); err != nil {
		// Not json's message: a syntax error quotes a byte of the input.
		return nil, fmt.Errorf("%s: not a JSON array of strings", EnvFile)
	}
	if err := CheckEnv(env); err != nil {
		return nil, fmt.Errorf("%s: %w", EnvFile, err)
	}
	return env, nil
}

// EncodeEnv is the EnvFile holding env, which must pass CheckEnv.
func EncodeEnv(env []string) ([]byte, error) {
	if err := CheckEnv(env); err != nil {
		return nil, err
	}
	if env == nil {
		env = []string{}
	}
	return json.Marshal(env)
}
