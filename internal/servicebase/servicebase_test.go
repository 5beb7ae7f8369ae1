package servicebase_test

import (
	"errors"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sbxedge/sbx/internal/servicebase"
)

func TestPrepare(t *testing.T) {
	t.Parallel()
	t.Run("fills in what is nil", func(t *testing.T) {
		var log *slog.Logger
		var reg *prometheus.Registry
		if err := servicebase.Prepare(func() error { return nil }, &log, &reg); err != nil {
			t.Fatal(err)
		}
		if log == nil || reg == nil {
			t.Fatalf("logger %v, registry %v; want both set", log, reg)
		}
		if n, err := testutil.GatherAndCount(reg, "go_goroutines"); err != nil || n != 1 {
			t.Errorf("fresh registry: %d go_goroutines series, %v; want the Go collector", n, err)
		}
	})
	t.Run("keeps what is given", func(t *testing.T) {
		log, reg := slog.Default(), prometheus.NewRegistry()
		gotLog, gotReg := log, reg
		if err := servicebase.Prepare(func() error { return nil }, &gotLog, &gotReg); err != nil {
			t.Fatal(err)
		}
		if gotLog != log || gotReg != reg {
			t.Error("Prepare replaced a logger or registry it was given")
		}
	})
	t.Run("invalid fills in nothing", func(t *testing.T) {
		bad := errors.New("bad config")
		var log *slog.Logger
		var reg *prometheus.Registry
		if err := servicebase.Prepare(func() error { return bad }, &log, &reg); !errors.Is(err, bad) {
			t.Fatalf("err = %v, want the validation error", err)
		}
		if log != nil || reg != nil {
			t.Error("Prepare filled in defaults for an invalid configuration")
		}
	})
}

func TestRedis(t *testing.T) {
	t.Parallel()
	if rdb, err := servicebase.Redis("", slog.New(slog.DiscardHandler)); rdb != nil || err != nil {
		t.Errorf("Redis(\"\") = %v, %v; want no client and no error", rdb, err)
	}
	if _, err := servicebase.Redis("http://not-redis", slog.New(slog.DiscardHandler)); err == nil {
		t.Error("Redis accepted a URL that is not redis://")
	}
	rdb, err := servicebase.Redis("redis://127.0.0.1:1/0", slog.New(slog.DiscardHandler))
	if err != nil || rdb == nil {
		t.Fatalf("Redis(redis://...) = %v, %v; want a client", rdb, err)
	}
	_ = rdb.Close()
}
