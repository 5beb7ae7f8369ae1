package lifecycle

import (
	"testing"

	"github.com/sbxedge/sbx/internal/initproto"
)

func TestWeighBusy(t *testing.T) {
	for _, c := range []struct {
		name string
		b    initproto.Busy
		busy bool
	}{
		{"nothing", initproto.Busy{}, false},
		{"a loop", initproto.Busy{Processes: []initproto.BusyProcess{{PID: 7, Command: "sh"}}}, true},
		{"quiet services", initproto.Busy{CPU: 0.02}, false},
		{"a compiling service", initproto.Busy{CPU: 0.8}, true},
		{"at the threshold", initproto.Busy{CPU: 0.1}, true},
	} {
		if v := weighBusy(c.b, 0.1); v.busy != c.busy || v.unknown {
			t.Errorf("%s: %+v, want busy %v", c.name, v, c.busy)
		}
	}
}
