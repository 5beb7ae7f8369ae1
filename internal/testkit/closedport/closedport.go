// Package closedport gives a test a loopback port that refuses
// connections and that nothing else on the machine can take while the
// test relies on it being closed.
//
// A port found free by listening on :0 and closing is free for anyone:
// under a loaded `go test ./...` another package's listener on
// 127.0.0.1:0 can be given the same number, and a test that expected a
// refusal (or its own app, started later on ::1) connects to a stranger
// instead. A bound socket that never listens refuses every connection
// and, bound without SO_REUSEADDR, keeps the kernel from handing its port
// to another bind.
package closedport

import (
	"fmt"
	"net"
	"strconv"
	"sync"
	"syscall"
	"testing"
)

// Port is a port number held closed on 127.0.0.1 and ::1.
type Port struct {
	N int

	mu  sync.Mutex
	fds map[string]int // loopback address → bound socket
}

// New reserves a port on both loopbacks until the test ends (or Listen
// frees one of them).
func New(t testing.TB) *Port {
	t.Helper()
	for range 50 {
		fd4, port, err := bind(syscall.AF_INET, "127.0.0.1", 0)
		if err != nil {
			t.Fatalf("closedport: %v", err)
		}
		fd6, _, err := bind(syscall.AF_INET6, "::1", port)
		if err != nil {
			_ = syscall.Close(fd4)
			continue // ::1's same number is in use: try another
		}
		p := &Port{N: port, fds: map[string]int{"127.0.0.1": fd4, "::1": fd6}}
		t.Cleanup(p.closeAll)
		return p
	}
	t.Fatal("closedport: no port free on both loopbacks in 50 tries")
	return nil
}

// Listen frees the port on host ("127.0.0.1" or "::1") and listens there
// at once, so nobody else can take it between the two. The other
// loopback stays held.
func (p *Port) Listen(host string) (net.Listener, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if fd, ok := p.fds[host]; ok {
		_ = syscall.Close(fd)
		delete(p.fds, host)
	}
	return net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p.N)))
}

func (p *Port) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for host, fd := range p.fds {
		_ = syscall.Close(fd)
		delete(p.fds, host)
	}
}

// bind makes a TCP socket of family bound to host:port (0: any free one),
// not listening, and returns it with its port.
func bind(family int, host string, port int) (int, int, error) {
	fd, err := syscall.Socket(family, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, syscall.IPPROTO_TCP)
	if err != nil {
		return -1, 0, fmt.Errorf("socket: %w", err)
	}
	var sa syscall.Sockaddr
	if family == syscall.AF_INET6 {
		if err := syscall.SetsockoptInt(fd, syscall.IPPROTO_IPV6, syscall.IPV6_V6ONLY, 1); err != nil {
			_ = syscall.Close(fd)
			return -1, 0, fmt.Errorf("IPV6_V6ONLY: %w", err)
		}
		sa6 := &syscall.SockaddrInet6{Port: port}
		copy(sa6.Addr[:], net.ParseIP(host).To16())
		sa = sa6
	} else {
		sa4 := &syscall.SockaddrInet4{Port: port}
		copy(sa4.Addr[:], net.ParseIP(host).To4())
		sa = sa4
	}
	if err := syscall.Bind(fd, sa); err != nil {
		_ = syscall.Close(fd)
		return -1, 0, fmt.Errorf("bind %s:%d: %w", host, port, err)
	}
	got, err := syscall.Getsockname(fd)
	if err != nil {
		_ = syscall.Close(fd)
		return -1, 0, fmt.Errorf("getsockname: %w", err)
	}
	switch a := got.(type) {
	case *syscall.SockaddrInet4:
		port = a.Port
	case *syscall.SockaddrInet6:
		port = a.Port
	}
	return fd, port, nil
}
