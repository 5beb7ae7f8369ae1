package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sbxedge/sbx/control/apiclient"
)

// keepAliveConn is one client keep-alive connection to the edge's
// preview listener, spoken to by hand: net/http's Transport would keep
// its own pool, and what is measured is the edge holding --keepalive
// connections at once.
type keepAliveConn struct {
	c    net.Conn
	r    *bufio.Reader
	host string
}

// get sends one GET /1k and reads the whole answer; the connection stays
// open for the next.
func (k *keepAliveConn) get() (time.Duration, int, error) {
	_ = k.c.SetDeadline(time.Now().Add(30 * time.Second))
	t0 := time.Now()
	if _, err := io.WriteString(k.c, "GET /1k HTTP/1.1\r\nHost: "+k.host+"\r\n\r\n"); err != nil {
		return 0, 0, err
	}
	resp, err := http.ReadResponse(k.r, nil)
	if err != nil {
		return 0, 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return 0, 0, err
	}
	if resp.Close {
		return 0, resp.StatusCode, fmt.Errorf("status %d and the edge closed the connection", resp.StatusCode)
	}
	return time.Since(t0), resp.StatusCode, nil
}

// keepAliveHosts is how many sandboxes' public ports the connections
// spread over: the simulated fleet holds each sandbox's upstream
// connections in control, so a few hosts keep control's descriptors to
// the pool's size, not the client's count.
const keepAliveHosts = 20

// keepAlive holds --keepalive connections through the preview proxy,
// one request each to open them, reads the edge's memory per connection,
// then sends a request on every one of them, 64 in flight at a time (a
// trickle: what is measured is the held count, not the burst, which
// edge/preview's in-flight ceiling bounds) and times them.
//
// Descriptors: this process holds one a connection plus the app's end of
// the pooled upstreams; the edge one a client connection plus its
// upstream pool; control (the fleet) two an upstream. At 10,000
// connections no process nears the 20,000 a container may cap it at,
// which 10,000 SSH sessions or WebSockets (two in the edge each) do not
// allow.
func (r *scaleRun) keepAlive(ctx context.Context) ([]scaleRow, error) {
	n := r.c.KeepAlive
	if n == 0 {
		return nil, nil
	}
	hosts := make([]string, min(keepAliveHosts, len(r.ids)))
	for i := range hosts {
		h, err := r.expose(ctx, r.ids[i], r.st.appPorts[0], apiclient.PortRequestAccessPublic)
		if err != nil {
			return nil, err
		}
		hosts[i] = h
	}
	settle()
	base := r.edgePss()
	g0, _ := r.edgeGauges()
	conns := make([]*keepAliveConn, n)
	defer func() {
		for _, k := range conns {
			if k != nil {
				k.c.Close()
			}
		}
	}()
	var (
		errs errCounts
		non2 atomic.Int64
	)
	octx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	t0 := time.Now()
	d := &net.Dialer{Timeout: 30 * time.Second}
	parallel(octx, 0, n, 32, func(i int) {
		c, err := d.DialContext(octx, "tcp", r.st.previewAddr)
		if err != nil {
			errs.add(fmt.Errorf("dial: %w", err))
			return
		}
		k := &keepAliveConn{c: c, r: bufio.NewReaderSize(c, 4096), host: hosts[i%len(hosts)]}
		_, code, err := k.get()
		if err != nil || code != http.StatusOK {
			if err == nil {
				err = fmt.Errorf("first request: status %d", code)
			}
			errs.add(err)
			c.Close()
			return
		}
		conns[i] = k
	})
	cancel()
	took := time.Since(t0)
	open := 0
	for _, k := range conns {
		if k != nil {
			open++
		}
	}
	settle()
	pss := r.edgePss()
	g1, _ := r.edgeGauges()
	fds := r.fdNote()
	per := float64(pss-base) / float64(max(open, 1)) / 1024

	var (
		mu  sync.Mutex
		lat []time.Duration
	)
	tctx, tcancel := context.WithTimeout(ctx, r.c.Traffic)
	defer tcancel()
	t1 := time.Now()
	parallel(tctx, 0, n, 64, func(i int) {
		k := conns[i]
		if k == nil {
			return
		}
		d, code, err := k.get()
		if err == nil && code != http.StatusOK {
			non2.Add(1)
			err = fmt.Errorf("status %d", code)
		}
		if err != nil {
			errs.add(err)
			return
		}
		mu.Lock()
		lat = append(lat, d)
		mu.Unlock()
	})
	secs := time.Since(t1).Seconds()
	return []scaleRow{
		{"preview keep-alive connections held by one edge", fmt.Sprint(n),
			fmt.Sprintf("%d (opened in %.0f s over %d hosts)", open, took.Seconds(), len(hosts)), verdict(open == n),
			fmt.Sprintf("%.2f goroutines a connection; %s", (g1-g0)/float64(max(open, 1)), errs.String())},
		{fmt.Sprintf("edge PSS per keep-alive connection at %d", n), noTarget,
			fmt.Sprintf("%.1f KiB (edge %.0f MiB, %.0f MiB before)", per, float64(pss)/(1<<20), float64(base)/(1<<20)), noTarget, fds},
		{fmt.Sprintf("preview p99, a request on each of %d connections", n), noTarget, msOf(quantile(lat, 0.99)), noTarget,
			fmt.Sprintf("p50 %s; %d requests, 64 in flight, %.0f req/s; %d non-200", msOf(quantile(lat, 0.5)), len(lat), float64(len(lat))/secs, non2.Load())},
	}, nil
}

// fdNote counts the open descriptors of this process, the edge and
// control (the simulated fleet) as they stand: where a row's connections
// hold them, against the per-process limit.
func (r *scaleRun) fdNote() string {
	count := func(pid int) int {
		es, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		return len(es)
	}
	return fmt.Sprintf("descriptors open: load tool %d, edge %d, control and fleet %d, sandbox app %d",
		count(os.Getpid()), count(r.st.edge.Process.Pid), count(r.st.control.Process.Pid), count(r.st.apps[0].Process.Pid))
}
