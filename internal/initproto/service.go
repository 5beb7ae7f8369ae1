// Package initproto is the wire protocol of the sandbox's init (see
// internal/sandboxinit): the service declarations, statuses, log lines
// and work reports it answers with, and the Client that calls it over a
// sandbox's SSH connection. Control and the edge link this and not the
// supervisor, which only the init's launchers (sbx-init, the local
// provider) run.
//
// The protocol: the client writes one JSON Request line on the SSH
// subsystem Subsystem; the server answers one JSON Response line and,
// for a followed log, one JSON Line per output line after it until
// either side closes.
package initproto

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Service is one declared long-running process.
type Service struct {
	Name string `json:"name"`
	// Command is run with Args as its argv; without Args it is a shell
	// line run by /bin/sh -c.
	Command string            `json:"command"`
	Args    []string          `json:"args,omitempty"`
	Cwd     string            `json:"cwd,omitempty"` // relative to the workspace
	Env     map[string]string `json:"env,omitempty"`
	// Port, when set, is where the service answers: it is "running" only
	// once something accepts on 127.0.0.1 or ::1 at that port.
	Port int `json:"port,omitempty"`
}

// Same reports whether s and o declare the same process: an init's sync
// does not restart an unchanged one, and control need not push a set the
// provider already started.
func (s Service) Same(o Service) bool {
	return s.Name == o.Name && s.Command == o.Command && slices.Equal(s.Args, o.Args) &&
		s.Cwd == o.Cwd && s.Port == o.Port && maps.Equal(s.Env, o.Env)
}

// Service states.
const (
	StateStarting   = "starting"   // started; its port does not answer yet
	StateRunning    = "running"    // alive (and its port answers)
	StateExited     = "exited"     // ended and not restarted (removed, or init stopping)
	StateRestarting = "restarting" // ended; waiting out the backoff
)

// Status is what the supervisor knows of one service.
type Status struct {
	Service
	State string `json:"state"`
	// ExitCode is the last exit's code (128+signal for a signal), nil
	// before the first exit.
	ExitCode *int `json:"exit_code,omitempty"`
	// Starts counts starts since the init began supervising it.
	Starts int `json:"starts"`
	// QuickExits counts its exits in a row, each sooner than StableAfter
	// after its start, while it is not running: a service that keeps
	// crashing, which a preview stops waiting for.
	QuickExits  int        `json:"quick_exits,omitempty"`
	LastStartAt *time.Time `json:"last_start_at,omitempty"`
	LastExitAt  *time.Time `json:"last_exit_at,omitempty"`
	PID         int        `json:"pid,omitempty"`
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ValidEnvName reports whether s may name an environment variable.
func ValidEnvName(s string) bool { return envNameRE.MatchString(s) }

// Validate checks a service declaration without side effects; the error
// names the bad field.
func (s Service) Validate() error {
	switch {
	case !nameRE.MatchString(s.Name):
		return fmt.Errorf("name: %q must be 1 to 63 lowercase letters, digits, '-' or '_', starting with a letter or digit", s.Name)
	case strings.TrimSpace(s.Command) == "":
		return errors.New("command: is required")
	case s.Port < 0 || s.Port > 65535:
		return fmt.Errorf("port: %d is not between 1 and 65535", s.Port)
	case s.Cwd != "" && !filepath.IsLocal(s.Cwd):
		return fmt.Errorf("cwd: %q must be a relative path inside the workspace", s.Cwd)
	}
	if strings.ContainsRune(s.Command, 0) || slices.ContainsFunc(s.Args, func(a string) bool { return strings.ContainsRune(a, 0) }) {
		return errors.New("command: command and args must not contain NUL bytes")
	}
	for k, v := range s.Env {
		if !envNameRE.MatchString(k) || strings.ContainsRune(v, 0) {
			return fmt.Errorf("env: %q: names must match %s and values must not contain NUL", k, envNameRE)
		}
	}
	return nil
}

// Line is one line of a service's output.
type Line struct {
	At   time.Time `json:"at"`
	Text string    `json:"text"`
}

// ErrUnknownService is returned for a name the supervisor does not run.
var ErrUnknownService = errors.New("unknown service")

// Busy is what an init reports about work running in its sandbox, for
// the idle detector: a sandbox running something (a nohup build, an exec
// still going) or using CPU is not idle, whatever its connections say.
type Busy struct {
	// Processes are the running processes that are neither the sandbox's
	// machinery (the init, sshd, the control call's own relay), nor its
	// services or their children, nor servers: a process listening on a
	// TCP port (a dev server started by hand) waits for traffic, which
	// the edge already counts, so like a service it is work only through
	// its CPU.
	Processes []BusyProcess `json:"processes"`
	// CPU is the cores every process of the sandbox (services included)
	// used over the sample window.
	CPU float64 `json:"cpu"`
}

// BusyProcess is one process of Busy.Processes.
type BusyProcess struct {
	PID     int    `json:"pid"`
	Command string `json:"command"`
}
