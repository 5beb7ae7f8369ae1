package main

import (
	"context"
	"testing"
)

// TestExecScenarioSmoke runs the exec comparison at its smallest size so
// the tool keeps working; the figures come from `go run ./loadtest exec`.
func TestExecScenarioSmoke(t *testing.T) {
	if err := runExec(context.Background(), []string{"-rounds", "3", "-calls", "1", "-timeout", "2m"}); err != nil {
		t.Fatal(err)
	}
}
