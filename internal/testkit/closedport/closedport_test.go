package closedport

import (
	"errors"
	"net"
	"strconv"
	"syscall"
	"testing"
)

func addr(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

func TestHeldClosedAndUntakeable(t *testing.T) {
	p := New(t)
	for _, host := range []string{"127.0.0.1", "::1"} {
		if c, err := net.Dial("tcp", addr(host, p.N)); !errors.Is(err, syscall.ECONNREFUSED) {
			if c != nil {
				c.Close()
			}
			t.Errorf("dial %s: %v, want refused", addr(host, p.N), err)
		}
		// What another test's listener would try: it must not get it.
		if ln, err := net.Listen("tcp", addr(host, p.N)); err == nil {
			ln.Close()
			t.Errorf("another listener took %s while it was held", addr(host, p.N))
		}
	}
	if ln, err := net.Listen("tcp", ":"+strconv.Itoa(p.N)); err == nil {
		ln.Close()
		t.Errorf("a wildcard listener took port %d while it was held", p.N)
	}
}

func TestListenFreesOneLoopback(t *testing.T) {
	p := New(t)
	ln, err := p.Listen("::1")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", addr("::1", p.N))
	if err != nil {
		t.Fatalf("dial the listener: %v", err)
	}
	c.Close()
	if _, err := net.Dial("tcp", addr("127.0.0.1", p.N)); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("127.0.0.1 after listening on ::1: %v, want still refused", err)
	}
}
