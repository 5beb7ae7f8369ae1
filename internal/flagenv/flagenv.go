// Package flagenv is what the binaries share for mapping SBX_* variables
// and secret files onto their flags: a flag wins over its variable, and a
// secret comes from a file (a mounted Kubernetes Secret) or else from a
// variable, never from a flag's value on the command line.
package flagenv

import (
	"fmt"
	"os"
	"strings"
)

// Env returns a lookup of variable k with a default for unset or empty,
// for use as flag defaults.
func Env(getenv func(string) string) func(k, def string) string {
	return func(k, def string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return def
	}
}

// Secret reads the secret in file (trimmed of surrounding white space)
// when file is set, else returns fallback (usually a variable's value).
// flag names the file's flag in the error.
func Secret(flag, file, fallback string) (string, error) {
	if file == "" {
		return fallback, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flag, err)
	}
	return strings.TrimSpace(string(b)), nil
}
