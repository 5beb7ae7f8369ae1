package store

import "time"

// Service is a long-running process a sandbox declares (a dev server, a
// database). Control stores the declaration; the sandbox's init runs it,
// and control pushes the whole set to the init whenever the sandbox
// becomes ready (created or restored).
type Service struct {
	SandboxID string
	Name      string
	// Command runs with Args as its argv; without Args it is a shell line.
	Command string
	Args    []string
	// Cwd is relative to the workspace; empty is the workspace.
	Cwd string
	Env map[string]string
	// Port is where it answers; 0 for none.
	Port      int
	CreatedAt time.Time
	UpdatedAt time.Time
}
