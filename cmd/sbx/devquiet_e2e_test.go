package main

import (
	"strings"
	"testing"
)

// TestDevStartsQuietly: a plain `sbx dev` start and stop, on its
// embedded defaults, logs no warning or error. A newcomer's first
// command should not print noise about setups it is not (one replica
// warned about tickets shared across replicas).
func TestDevStartsQuietly(t *testing.T) {
	p := startDev(t, t.TempDir(), "")
	p.stop()
	p.log.mu.Lock()
	out := p.log.String()
	p.log.mu.Unlock()
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			t.Errorf("sbx dev logged: %s", line)
		}
	}
}
