package preview_test

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPortOnIPv6LoopbackOnly: a dev server bound to "localhost" that
// picked ::1 (Node 17+, Vite) is reached like one on 127.0.0.1.
func TestPortOnIPv6LoopbackOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newTestApp())
	ln := listenV6Only(t)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "v6 app, path %s", r.URL.Path)
	}), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })

	e.expose("vsix", "sbx-a", "acct-a", false, false)
	rt, _ := e.res.Resolve(t.Context(), "vsix")
	rt.Port = ln.Addr().(*net.TCPAddr).Port
	e.res.set("vsix", rt)
	for i := range 3 { // the second and third ride on the remembered address
		resp, body := e.get("vsix", fmt.Sprintf("/try%d", i), "Authorization", "Bearer "+tokenA, "Connection", "close")
		if resp.StatusCode != 200 || !strings.HasPrefix(body, "v6 app, path /try") {
			t.Fatalf("request %d to a port on ::1 only: %d %q, want 200 from the app", i, resp.StatusCode, body)
		}
	}
	// The v4 app on another port still answers: the order is per port.
	e.expose("vfour", "sbx-a", "acct-a", false, false)
	if resp, body := e.get("vfour", "/", "Authorization", "Bearer "+tokenA); resp.StatusCode != 200 {
		t.Fatalf("v4 port: %d %q", resp.StatusCode, body)
	}
}

// listenV6Only listens on a port of ::1 that nothing can take on
// 127.0.0.1 while the test runs: the proxy tries 127.0.0.1 first, and
// another test's server given the same port number there (ports are per
// address) answered in this one's place. The v4 side is held by a socket
// bound without SO_REUSEADDR and never listening: a connection to it is
// refused, and no one else can bind it.
func listenV6Only(t *testing.T) net.Listener {
	t.Helper()
	for range 20 {
		ln, err := net.Listen("tcp", "[::1]:0")
		if err != nil {
			t.Fatalf("listen on ::1: %v", err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			syscall.Close(fd)
			ln.Close() // taken on 127.0.0.1: try another
			continue
		}
		t.Cleanup(func() { syscall.Close(fd) })
		return ln
	}
	t.Fatal("no port free on both ::1 and 127.0.0.1 in 20 tries")
	return nil
}
