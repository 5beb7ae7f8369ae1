package h1

import (
	"bufio"
	"io"
	"log"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/sbxedge/sbx/internal/httplimit"
)

// BenchmarkLeanLoop is the lean loop's own cost per request: one client
// on loopback sends small GETs one after another, each answered with a
// few bytes. Compare allocs/op and ns/op (with benchstat) across changes
// of the loop.
func BenchmarkLeanLoop(b *testing.B) {
	s := New(&http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, "ok")
		}),
		ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute,
		ErrorLog: log.New(io.Discard, "", 0),
	}, true, httplimit.BodyDeadline{})
	ln := listen(b)
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = s.Serve(ln) }()
	b.Cleanup(func() { _ = s.Close(); <-stopped })
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	req := []byte("GET /x HTTP/1.1\r\nHost: h\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n")
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
	}
}
