//go:build sbxlocal

package main

import "github.com/sbxedge/sbx/control/standalone"

// A control built with -tags sbxlocal also runs sandboxes on this
// machine (--provider local, the embedded server): replicas on one
// machine with their own Postgres and Redis, as `go run ./loadtest fleet`
// runs them. Its sandboxes live inside the control process that made
// them. Store and activity stay Postgres and Redis.
func init() { providers["local"] = standalone.Local{} }
