// Package servicetest runs a service the way its command does, in the
// background of a test, and waits until it is ready.
package servicetest

import "testing"

// Start calls run in a goroutine, handing it the ready callback a
// service's Run takes, and returns what run reported ready together with a
// channel that gets run's result. If run returns before it is ready, Start
// fails the test, naming the service what.
func Start[S any](t testing.TB, what string, run func(ready func(S)) error) (S, <-chan error) {
	t.Helper()
	started := make(chan S, 1)
	done := make(chan error, 1)
	go func() { done <- run(func(s S) { started <- s }) }()
	var s S
	select {
	case s = <-started:
	case err := <-done:
		t.Fatalf("%s did not start: %v", what, err)
	}
	return s, done
}
