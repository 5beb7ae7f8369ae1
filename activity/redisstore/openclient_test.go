package redisstore_test

import (
	"log/slog"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sbxedge/sbx/activity/redisstore"
)

// TestOpenClient is not parallel: OpenClient sets go-redis's one
// process-wide logger, which the other tests' clients read.
func TestOpenClient(t *testing.T) {
	t.Cleanup(func() { redis.SetLogger(quietLogger{}) })
	log := slog.New(slog.DiscardHandler)
	if rdb, err := redisstore.OpenClient("", log); rdb != nil || err != nil {
		t.Errorf("OpenClient(\"\") = %v, %v; want no client and no error", rdb, err)
	}
	if _, err := redisstore.OpenClient("http://not-redis", log); err == nil {
		t.Error("OpenClient accepted a URL that is not redis://")
	}
	rdb, err := redisstore.OpenClient("redis://127.0.0.1:1/0", log)
	if err != nil || rdb == nil {
		t.Fatalf("OpenClient(redis://...) = %v, %v; want a client", rdb, err)
	}
	_ = rdb.Close()
}
