// Package flagenv is what the service binaries share for mapping SBX_*
// variables and secret files onto their flags, and the main that runs
// them: a flag wins over its variable, and a secret comes from a file (a
// mounted Kubernetes Secret) or else from a variable, never from a flag's
// value on the command line.
package flagenv

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// Main is a service binary's main. It parses the config from the command
// line and the environment (a bad one exits 2, saying so on stderr after
// name), logs JSON to stderr at the level parse returns, and runs until
// SIGINT or SIGTERM; a run that fails is logged and exits 1.
func Main[C any](name string, parse func(args []string, getenv func(string) string) (C, slog.Level, error),
	run func(ctx context.Context, cfg C, log *slog.Logger) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, level, err := parse(os.Args[1:], os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if err := run(ctx, cfg, log); err != nil {
		log.Error(name+" stopped", "err", err)
		os.Exit(1)
	}
}

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

// Unshown sets each flag of vars (flag name: variable) that the command
// line did not set from its variable, if that is set; call it after
// fs.Parse. It is for flags whose value may hold a secret, such as a URL
// with a password in it: a default taken from the environment shows in
// -help and in the usage a bad flag prints, a value set here does not.
// Say "(default: $VAR)" in the flag's usage instead.
func Unshown(fs *flag.FlagSet, getenv func(string) string, vars map[string]string) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for name, v := range vars {
		if given[name] {
			continue
		}
		if val := getenv(v); val != "" {
			if err := fs.Set(name, val); err != nil {
				return fmt.Errorf("%s: %w", v, err)
			}
		}
	}
	return nil
}
