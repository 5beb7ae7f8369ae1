package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain proves control, started and stopped the way main does, ends
// every goroutine it started.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
