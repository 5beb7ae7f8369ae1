package sshbroker

import (
	"net"
	"testing"
)

func TestFailLimiterGroupsSources(t *testing.T) {
	l := newFailLimiter(0.000001, 2) // effectively no refill during the test
	addr := func(s string) net.Addr {
		a, err := net.ResolveTCPAddr("tcp", s)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	cases := []struct {
		name      string
		spend     []string
		probe     string
		wantAllow bool
	}{
		{"fresh source", nil, "192.0.2.1:22", true},
		{"spent v4 source", []string{"192.0.2.2:1", "192.0.2.2:2"}, "192.0.2.2:3", false},
		{"neighbour v4 unaffected", nil, "192.0.2.3:1", true},
		{"same /64 shares a bucket", []string{"[2001:db8::1]:1", "[2001:db8::2]:1"}, "[2001:db8::ffff]:1", false},
		{"other /64 unaffected", nil, "[2001:db8:0:1::1]:1", true},
		{"v4-mapped v6 is the v4 source", nil, "[::ffff:192.0.2.2]:9", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, s := range c.spend {
				l.fail(addr(s))
			}
			if got := l.allowed(addr(c.probe)); got != c.wantAllow {
				t.Fatalf("allowed(%s) = %v, want %v", c.probe, got, c.wantAllow)
			}
		})
	}
}

func FuzzValidUsername(f *testing.F) {
	for _, s := range []string{"alpha", "sbx-01HZX", "a/b", "", "root@host", "x\x00y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !validUsername(s) {
			return
		}
		if len(s) == 0 || len(s) > 128 {
			t.Fatalf("accepted length %d", len(s))
		}
		for _, r := range s {
			if !(r == '-' || r == '_' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
				t.Fatalf("accepted %q", s)
			}
		}
	})
}
