package podtcp

import (
	"io"
	"net"
	"sync"
	"testing"
)

// BenchmarkRequests is the preview's small-request pattern through the
// forwarder: many connections, each writing 1 KiB and reading 1 KiB back
// from an echo app, in parallel. With the forwarder's CPU it includes the
// app's and the client's; compare with -bench 'Requests/direct'.
func BenchmarkRequests(b *testing.B) {
	sb := startSandbox(b)
	app, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := app.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				buf := make([]byte, 1024)
				for {
					if _, err := io.ReadFull(c, buf); err != nil {
						return
					}
					if _, err := c.Write(buf); err != nil {
						return
					}
				}
			})
		}
	})
	b.Cleanup(func() { app.Close(); wg.Wait() })
	port := app.Addr().(*net.TCPAddr).Port
	d := &Dialer{CA: sb.ca}
	for _, road := range []string{"direct", "forwarder"} {
		b.Run(road, func(b *testing.B) {
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				var c net.Conn
				var err error
				if road == "direct" {
					c, err = net.Dial("tcp", app.Addr().String())
				} else {
					c, err = d.Dial(b.Context(), sb.target(), port)
				}
				if err != nil {
					b.Error(err)
					return
				}
				defer c.Close()
				buf := make([]byte, 1024)
				for pb.Next() {
					if _, err := c.Write(buf); err != nil {
						b.Error(err)
						return
					}
					if _, err := io.ReadFull(c, buf); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
