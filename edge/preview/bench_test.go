package preview_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sbxedge/sbx/internal/initproto"
	"github.com/sbxedge/sbx/internal/podssh"
)

// BenchmarkDownload reads one 64 MiB response per op: straight from the
// upstream, through a bare direct-tcpip channel on the pooled SSH
// connection (the floor the proxy stands on), and through the proxy.
// Compare MB/s between the sub-benchmarks of one run.
func BenchmarkDownload(b *testing.B) {
	if reverseProxyPass {
		b.Skip("the benchmarks compare both relays in the first pass")
	}
	const n = 64 << 20
	e := newEnv(b, newTestApp())
	e.expose("bench", "sbx-a", "acct-a", false, false)
	target := "/big?n=" + strconv.Itoa(n)

	get := func(b *testing.B, c *http.Client, url string, hdr http.Header) {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header = hdr
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		got, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || got != n {
			b.Fatalf("read %d bytes: %v", got, err)
		}
	}
	b.Run("direct", func(b *testing.B) {
		c := &http.Client{}
		defer c.CloseIdleConnections()
		b.SetBytes(n)
		for b.Loop() {
			get(b, c, "http://127.0.0.1:"+strconv.Itoa(e.upPort)+target, http.Header{})
		}
	})
	b.Run("ssh-channel", func(b *testing.B) {
		c := sshChannelClient(b, e)
		defer c.CloseIdleConnections()
		b.SetBytes(n)
		for b.Loop() {
			get(b, c, "http://upstream"+target, http.Header{})
		}
	})
	proxy := func(addr string) func(b *testing.B) {
		return func(b *testing.B) {
			c := clientTo(addr)
			defer c.CloseIdleConnections()
			b.SetBytes(n)
			for b.Loop() {
				get(b, c, e.url("bench", target), http.Header{"Authorization": {"Bearer " + tokenA}})
			}
		}
	}
	rpAddr, _ := e.twin(true)
	b.Run("proxy", proxy(e.addr))
	b.Run("proxy-reverseproxy", proxy(rpAddr))
}

// clientTo is env.client for another listener (a twin proxy).
func clientTo(addr string) *http.Client {
	d := &net.Dialer{}
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, addr)
	}}}
}

// sshChannelClient reaches the upstream through bare direct-tcpip
// channels on one pooled SSH connection: the floor under the proxy.
func sshChannelClient(b *testing.B, e *env) *http.Client {
	pool := podssh.NewPool(e.ca, nil)
	b.Cleanup(func() { _ = pool.Close() })
	tgt := podssh.Target{SandboxID: "bench", Addr: e.sshd.Addr, User: e.sshd.User, HostKey: e.sshd.HostKey}
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		cl, err := pool.Client(ctx, tgt)
		if err != nil {
			return nil, err
		}
		return cl.DialContext(ctx, "tcp", "127.0.0.1:"+strconv.Itoa(e.upPort))
	}}}
}

// BenchmarkSmallRequests sends 1 KiB GETs from 32 parallel clients
// straight to the upstream (the baseline), through bare SSH channels (the
// floor) and through the proxy; compare ns/op within one run.
func BenchmarkSmallRequests(b *testing.B) {
	if reverseProxyPass {
		b.Skip("the benchmarks compare both relays in the first pass")
	}
	e := newEnv(b, newTestApp())
	e.expose("bench", "sbx-a", "acct-a", false, false)
	run := func(b *testing.B, c *http.Client, url string) {
		c.Transport.(*http.Transport).MaxIdleConnsPerHost = 64
		defer c.CloseIdleConnections()
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				req, _ := http.NewRequest("GET", url, nil)
				req.Header.Set("Authorization", "Bearer "+tokenA)
				resp, err := c.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	b.Run("direct", func(b *testing.B) {
		run(b, &http.Client{Transport: &http.Transport{}}, "http://127.0.0.1:"+strconv.Itoa(e.upPort)+"/small")
	})
	b.Run("ssh-channel", func(b *testing.B) { run(b, sshChannelClient(b, e), "http://upstream/small") })
	b.Run("proxy", func(b *testing.B) { run(b, e.client(), e.url("bench", "/small")) })
	rpAddr, _ := e.twin(true)
	b.Run("proxy-reverseproxy", func(b *testing.B) { run(b, clientTo(rpAddr), e.url("bench", "/small")) })
}

// BenchmarkWakePortWait is a wake's wait for its port: a suspended
// private preview whose sandbox is ready as soon as it is woken and whose
// app (declared by a service) listens 5 ms later, as a dev server that
// starts fast does; one op is an API client's GET from its start to the
// app's answer. Run with -benchtime=20x (at most 64).
func BenchmarkWakePortWait(b *testing.B) {
	const most = 64
	var ports []int
	var services []initproto.Status
	for i := range most {
		ports = append(ports, freePort(b))
		services = append(services, initproto.Status{Service: initproto.Service{Name: fmt.Sprintf("web%d", i), Command: "x", Port: ports[i]}, State: "starting"})
	}
	waker := &gateWaker{ready: map[string]func(){}}
	e := newEnv(b, newTestApp(), envOptions{waker: waker, sshdConfig: initStatus(b, services...)})
	if b.N > most {
		b.Fatalf("-benchtime=%dx: at most %dx", b.N, most)
	}
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		// One sandbox: its SSH connection (for the init) is pooled, as a
		// real sandbox's is across its wakes.
		label, id := fmt.Sprintf("wake%d", i), "sbx-w"
		ready := asleep(b, e, label, id, "acct-a", ports[i])
		appUp := serveLater(b, waker, id, func() { e.res.set(label, ready) }, ports[i], 5*time.Millisecond)
		b.StartTimer()
		resp, body := e.get(label, "/api", "Authorization", "Bearer "+tokenA)
		b.StopTimer()
		<-appUp
		if resp.StatusCode != 200 || !strings.Contains(body, "hello from the sandbox") {
			b.Fatalf("woken GET: %d %q, want the app's answer", resp.StatusCode, body)
		}
		b.StartTimer()
	}
}
