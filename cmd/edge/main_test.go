package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain proves the edge and the control it runs against stop every
// goroutine they start.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
