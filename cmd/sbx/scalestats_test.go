package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestQuantileNearestRank(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	for _, tc := range []struct {
		sorted []time.Duration
		q      float64
		want   float64
	}{
		{nil, 0.5, 0},
		{ms(7), 0.99, 7},
		{ms(1, 2, 3, 4), 0.5, 2},
		{ms(hundred...), 0.50, 50},
		{ms(hundred...), 0.95, 95},
		{ms(hundred...), 0.99, 99},
		{ms(hundred...), 1, 100},
	} {
		if got := quantile(tc.sorted, tc.q); got != tc.want {
			t.Errorf("quantile(%d samples, %g) = %g, want %g", len(tc.sorted), tc.q, got, tc.want)
		}
	}
}

func TestParseMetricsSumsOverLabels(t *testing.T) {
	text := `# HELP go_goroutines Number of goroutines.
# TYPE go_goroutines gauge
go_goroutines 42
process_resident_memory_bytes 1.048576e+07
sbx_listener_open_connections{listener="API"} 3
sbx_listener_open_connections{listener="a } b"} 4 1700000000000
sbx_other_thing 9
process_cpu_seconds_total not-a-number
`
	got, err := parseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"go_goroutines": 42, "process_resident_memory_bytes": 10485760, "sbx_listener_open_connections": 7}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("parseMetrics = %v, want %v", got, want)
	}
	rows := serverRows(map[string]float64{"process_resident_memory_bytes": 1 << 20}, got)
	if len(rows) != 3 || rows[0].Name != "memory RSS (MiB)" || rows[0].Start != 1 || rows[0].Loaded != 10 {
		t.Errorf("serverRows = %+v, want RSS in MiB first, and only the series seen", rows)
	}
}

func TestErrClass(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&apiError{Code: "sandbox_state"}, "api sandbox_state"},
		{fmt.Errorf("get: %w", &httpStatusError{code: 502}), "http 502"},
		{fmt.Errorf("%w: %w", errEchoTimeout, io.EOF), "timeout"},
		{context.DeadlineExceeded, "timeout"},
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, "refused"},
		{&net.OpError{Op: "read", Err: syscall.ECONNRESET}, "reset"},
		{io.ErrUnexpectedEOF, "closed"},
		{fmt.Errorf("something else"), "other"},
	} {
		if got := errClass(tc.err); got != tc.want {
			t.Errorf("errClass(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

func TestNiceCeil(t *testing.T) {
	for in, want := range map[float64]float64{0: 1, 0.3: 0.5, 1: 1, 1.2: 2, 3: 5, 7: 10, 46.6: 50, 150: 200} {
		if got := niceCeil(in); got != want {
			t.Errorf("niceCeil(%g) = %g, want %g", in, got, want)
		}
	}
}
