package invalidation_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/invalidation"
	"github.com/sbxedge/sbx/internal/testkit/redistest"
	"github.com/sbxedge/sbx/internal/testkit/waitfor"
)

// TestResubscribeRechecksEverything: an invalidation published while
// Redis is away is lost, so the subscriber, once go-redis has
// re-subscribed to a Redis restarted empty, hands its receivers an
// InvalidateAll (they re-check every connection) and then delivers
// invalidations again. Found by `go run ./loadtest fleet`: a port
// unexposed and a sandbox deleted during a Redis SIGSTOP kept their
// connections open until the preview's 30 s re-check, and the SSH one
// for good.
func TestResubscribeRechecksEverything(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	got := make(chan edgeapi.Invalidation, 16)
	stop := invalidation.Subscribe(rdb, func(_ context.Context, inv edgeapi.Invalidation) { got <- inv }, slog.New(slog.DiscardHandler))
	defer stop()
	want := func(what string, w edgeapi.Invalidation, within time.Duration) {
		t.Helper()
		select {
		case inv := <-got:
			if inv != w {
				t.Fatalf("%s: got %+v, want %+v", what, inv, w)
			}
		case <-time.After(within):
			t.Fatalf("%s: nothing within %v", what, within)
		}
	}
	publish := func(inv edgeapi.Invalidation) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return invalidation.Publish(ctx, rdb, inv)
	}
	port := func(l string) edgeapi.Invalidation {
		return edgeapi.Invalidation{Kind: edgeapi.InvalidatePort, Label: l}
	}
	if err := publish(port("before")); err != nil {
		t.Fatal(err)
	}
	want("before the restart", port("before"), 5*time.Second)

	srv.Kill()
	if err := publish(port("lost")); err == nil {
		t.Fatal("published with Redis down")
	}
	srv.Restart()
	// go-redis notices the dead connection at its next health check (3 s)
	// and re-subscribes; a hang detector, not a speed check.
	want("after the re-subscription", edgeapi.Invalidation{Kind: edgeapi.InvalidateAll}, 30*time.Second)
	waitfor.Cond(t, 10*time.Second, "a publish after the restart", func() bool { return publish(port("after")) == nil })
	want("after the restart", port("after"), 5*time.Second)
	select {
	case inv := <-got:
		t.Fatalf("unexpected %+v", inv)
	default:
	}
}
