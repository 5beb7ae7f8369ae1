package lifecycle

import (
	"testing"

	"github.com/sbxedge/sbx/internal/sandboxinit"
)

func TestWeighBusy(t *testing.T) {
	for _, c := range []struct {
		name string
		b    sandboxinit.Busy
		busy bool
	}{
		{"nothing", sandboxinit.Busy{}, false},
		{"a loop", sandboxinit.Busy{Processes: []sandboxinit.BusyProcess{{PID: 7, Command: "sh"}}}, true},
		{"quiet services", sandboxinit.Busy{CPU: 0.02}, false},
		{"a compiling service", sandboxinit.Busy{CPU: 0.8}, true},
		{"at the threshold", sandboxinit.Busy{CPU: 0.1}, true},
	} {
		if v := weighBusy(c.b, 0.1); v.busy != c.busy || v.unknown {
			t.Errorf("%s: %+v, want busy %v", c.name, v, c.busy)
		}
	}
}
