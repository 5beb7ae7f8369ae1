package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// serverSeries are the /metrics series sbx scaletest reads, each summed
// over its labels, with the name its table shows.
var serverSeries = []struct{ metric, name string }{
	{"process_resident_memory_bytes", "memory RSS (MiB)"},
	{"go_memstats_heap_inuse_bytes", "heap in use (MiB)"},
	{"go_goroutines", "goroutines"},
	{"process_cpu_seconds_total", "CPU (s)"},
	{"process_open_fds", "open fds"},
	{"sbx_listener_open_connections", "listener connections"},
	{"sbx_sshbroker_connections_open", "ssh broker connections"},
	{"sbx_preview_websockets_open", "preview websockets"},
}

// serverRow is one server-side figure at the run's start and with the
// load held.
type serverRow struct {
	Name   string  `json:"name"`
	Metric string  `json:"metric"`
	Start  float64 `json:"start"`
	Loaded float64 `json:"loaded"`
}

// scrapeMetrics reads the Prometheus text exposition at url and sums each
// series of serverSeries over its labels; a series the server does not
// export is absent from the map.
func scrapeMetrics(ctx context.Context, url string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("--metrics %s: %w", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("read metrics at %s: HTTP %d", url, resp.StatusCode)
	}
	return parseMetrics(io.LimitReader(resp.Body, 64<<20))
}

// parseMetrics sums the wanted series of a text exposition
// (name{labels} value [timestamp]).
func parseMetrics(r io.Reader) (map[string]float64, error) {
	want := map[string]bool{}
	for _, s := range serverSeries {
		want[s.metric] = true
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		end := strings.IndexAny(line, "{ ")
		if end < 0 || !want[line[:end]] {
			continue
		}
		rest := line[end:]
		if rest[0] == '{' {
			close := strings.LastIndexByte(rest, '}')
			if close < 0 {
				continue
			}
			rest = rest[close+1:]
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		out[line[:end]] += v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	return out, nil
}

// serverRows pairs the two scrapes, in MiB where the name says so.
func serverRows(start, loaded map[string]float64) []serverRow {
	var out []serverRow
	for _, s := range serverSeries {
		a, okA := start[s.metric]
		b, okB := loaded[s.metric]
		if !okA && !okB {
			continue
		}
		if strings.Contains(s.name, "MiB") {
			a, b = a/(1<<20), b/(1<<20)
		}
		out = append(out, serverRow{Name: s.name, Metric: s.metric, Start: a, Loaded: b})
	}
	return out
}
