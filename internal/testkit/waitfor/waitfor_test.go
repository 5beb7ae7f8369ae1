package waitfor

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestTry(t *testing.T) {
	var n atomic.Int32
	if !Try(t, 10*time.Second, func() bool { return n.Add(1) == 3 }) {
		t.Fatalf("condition true on the third check was not seen (%d checks)", n.Load())
	}
	if Try(t, 3*Interval, func() bool { return false }) {
		t.Fatal("a condition never true was reported true")
	}
}
