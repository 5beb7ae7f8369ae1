package sandboxinit

import (
	"github.com/sbxedge/sbx/internal/initproto"
)

// The wire types are initproto's, which the init's callers (control, the
// edge) link without the supervisor; these names keep the supervisor's
// code as it was.
type (
	Service     = initproto.Service
	Status      = initproto.Status
	Line        = initproto.Line
	Busy        = initproto.Busy
	BusyProcess = initproto.BusyProcess
	Request     = initproto.Request
	Response    = initproto.Response
)

// Service states (initproto's).
const (
	StateStarting   = initproto.StateStarting
	StateRunning    = initproto.StateRunning
	StateExited     = initproto.StateExited
	StateRestarting = initproto.StateRestarting
)

// ErrUnknownService is initproto's.
var ErrUnknownService = initproto.ErrUnknownService
