package egress

import (
	"testing"
	"time"
)

func TestMemoryLogRing(t *testing.T) {
	t.Parallel()
	l := &MemoryLog{PerSandbox: 3}
	t0 := time.Unix(1_700_000_000, 0)
	for i := range 5 {
		l.Record(Decision{SandboxID: "a", Port: uint16(i + 1), Time: t0.Add(time.Duration(i) * time.Second)})
	}
	l.Record(Decision{SandboxID: "b", Port: 99})
	ports := func(ds []Decision) []uint16 {
		var out []uint16
		for _, d := range ds {
			out = append(out, d.Port)
		}
		return out
	}
	tests := []struct {
		name          string
		id            string
		offset, limit int
		want          []uint16
	}{
		{"newest first, oldest dropped", "a", 0, 10, []uint16{5, 4, 3}},
		{"limit", "a", 0, 2, []uint16{5, 4}},
		{"offset", "a", 2, 2, []uint16{3}},
		{"offset past end", "a", 3, 2, nil},
		{"other sandbox", "b", 0, 10, []uint16{99}},
		{"unknown sandbox", "c", 0, 10, nil},
		{"zero limit", "a", 0, 0, nil},
	}
	for _, tt := range tests {
		got := ports(l.Recent(tt.id, tt.offset, tt.limit))
		if len(got) != len(tt.want) {
			t.Errorf("%s: Recent = %v, want %v", tt.name, got, tt.want)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("%s: Recent = %v, want %v", tt.name, got, tt.want)
				break
			}
		}
	}
	l.Forget("a")
	if got := l.Recent("a", 0, 10); got != nil {
		t.Errorf("after Forget: %v", got)
	}
}
