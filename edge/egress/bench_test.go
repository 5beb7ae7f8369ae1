package egress

import (
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/sbxedge/sbx/internal/egresspolicy"
)

// The gateway's overhead against the same work done direct, all on
// loopback:
//
//	go test ./edge/egress -run '^$' -bench . -count 3
//
// Download: 100 MiB from a TCP server, through a CONNECT tunnel or
// straight. Connect: one TCP connection opened and closed, through the
// gateway (CONNECT, authentication, policy, dial) or with a plain dial.

const downloadSize = 100 << 20

var noDeadline time.Time

// sender accepts connections and writes n bytes to each, then closes
// it; it returns its port.
func sender(b *testing.B, n int64) uint16 {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 256<<10)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for left := n; left > 0; {
					k := min(left, int64(len(buf)))
					if _, err := c.Write(buf[:k]); err != nil {
						return
					}
					left -= k
				}
			}()
		}
	}()
	b.Cleanup(func() { ln.Close(); <-done })
	return netip.MustParseAddrPort(ln.Addr().String()).Port()
}

func BenchmarkDownload(b *testing.B) {
	port := sender(b, downloadSize)
	target := "127.0.0.1:" + strconv.Itoa(int(port))
	b.Run("direct", func(b *testing.B) {
		b.SetBytes(downloadSize)
		for b.Loop() {
			c, err := net.Dial("tcp", target)
			if err != nil {
				b.Fatal(err)
			}
			if n, err := io.Copy(io.Discard, c); err != nil || n != downloadSize {
				b.Fatalf("read %d, %v", n, err)
			}
			c.Close()
		}
	})
	b.Run("gateway", func(b *testing.B) {
		r := newRig(b, egresspolicy.MustParse(egresspolicy.Spec{Egress: egresspolicy.Open}), loopback)
		b.SetBytes(downloadSize)
		for b.Loop() {
			resp, c, br := connect(b, r.url, target, basic(sandboxID, secret))
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("CONNECT: %d", resp.StatusCode)
			}
			c.SetDeadline(noDeadline)
			if n, err := io.Copy(io.Discard, br); err != nil || n != downloadSize {
				b.Fatalf("read %d, %v", n, err)
			}
			c.Close()
		}
	})
}

func BenchmarkConnect(b *testing.B) {
	port := sender(b, 0)
	target := "127.0.0.1:" + strconv.Itoa(int(port))
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			c, err := net.Dial("tcp", target)
			if err != nil {
				b.Fatal(err)
			}
			c.Close()
		}
	})
	b.Run("gateway", func(b *testing.B) {
		r := newRig(b, egresspolicy.MustParse(egresspolicy.Spec{Egress: egresspolicy.Open}), loopback)
		for b.Loop() {
			resp, c, _ := connect(b, r.url, target, basic(sandboxID, secret))
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("CONNECT: %d", resp.StatusCode)
			}
			c.Close()
		}
	})
}
