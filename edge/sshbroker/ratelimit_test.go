package sshbroker

import (
	"net"
	"testing"
)

func TestAuthLimits(t *testing.T) {
	// Effectively no refill during the test.
	l := newAuthLimits(Config{FailedAuthRate: 1e-6, FailedAuthBurst: 2, SourceFailedAuthRate: 1e-6, SourceFailedAuthBurst: 4})
	addr := func(s string) net.Addr {
		a, err := net.ResolveTCPAddr("tcp", s)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	type cred struct{ src, user, fp string }
	cases := []struct {
		name              string
		spend             []cred
		probe             cred
		wantCred, wantSrc bool
	}{
		{"fresh source", nil, cred{"192.0.2.1:22", "alpha", "k1"}, true, true},
		{"spent credential", []cred{{"192.0.2.2:1", "alpha", "k1"}, {"192.0.2.2:2", "alpha", "k1"}}, cred{"192.0.2.2:3", "alpha", "k1"}, false, true},
		{"another key from the same source", nil, cred{"192.0.2.2:4", "alpha", "k2"}, true, true},
		{"another user with the spent key", nil, cred{"192.0.2.2:4", "beta", "k1"}, true, true},
		{"the spent key from another source", nil, cred{"192.0.2.3:1", "alpha", "k1"}, true, true},
		{"v4-mapped v6 is the v4 source", nil, cred{"[::ffff:192.0.2.2]:9", "alpha", "k1"}, false, true},
		{"rotating keys spend the source", []cred{{"192.0.2.2:5", "alpha", "k3"}, {"192.0.2.2:6", "alpha", "k4"}}, cred{"192.0.2.2:7", "alpha", "k5"}, true, false},
		{"same /64 shares a ceiling", []cred{{"[2001:db8::1]:1", "a", "1"}, {"[2001:db8::2]:1", "b", "2"}, {"[2001:db8::3]:1", "c", "3"}, {"[2001:db8::4]:1", "d", "4"}},
			cred{"[2001:db8::ffff]:1", "e", "5"}, true, false},
		{"other /64 unaffected", nil, cred{"[2001:db8:0:1::1]:1", "a", "1"}, true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, s := range c.spend {
				l.fail(addr(s.src), s.user, s.fp)
			}
			if got := l.credAllowed(addr(c.probe.src), c.probe.user, c.probe.fp); got != c.wantCred {
				t.Fatalf("credAllowed(%+v) = %v, want %v", c.probe, got, c.wantCred)
			}
			if got := l.sourceAllowed(addr(c.probe.src)); got != c.wantSrc {
				t.Fatalf("sourceAllowed(%s) = %v, want %v", c.probe.src, got, c.wantSrc)
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
