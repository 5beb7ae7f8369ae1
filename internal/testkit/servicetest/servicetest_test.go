package servicetest

import (
	"errors"
	"testing"
)

// TestStart: Start returns what run reported ready while run goes on, and
// run's result arrives on the channel once it returns.
func TestStart(t *testing.T) {
	t.Parallel()
	stop := make(chan struct{})
	errStopped := errors.New("stopped")
	got, done := Start(t, "service", func(ready func(int)) error {
		ready(42)
		<-stop
		return errStopped
	})
	if got != 42 {
		t.Fatalf("Start returned %d, want what run reported ready (42)", got)
	}
	select {
	case err := <-done:
		t.Fatalf("run's result %v arrived before it returned", err)
	default:
	}
	close(stop)
	if err := <-done; !errors.Is(err, errStopped) {
		t.Fatalf("done = %v, want run's own result", err)
	}
}
