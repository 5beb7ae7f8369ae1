package preview_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"

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
