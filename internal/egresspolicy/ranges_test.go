package egresspolicy

import (
	"net/netip"
	"strings"
	"testing"
)

func TestRangesCheck(t *testing.T) {
	t.Parallel()
	r, err := NewRanges(RangesConfig{
		Cluster: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("198.19.0.0/16")},
		Trust:   []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.20.0.0/16"), netip.MustParsePrefix("198.19.5.0/24")},
		Own: []netip.AddrPort{
			netip.MustParseAddrPort("127.0.0.1:8080"), // API
			netip.MustParseAddrPort("10.20.0.5:5432"), // Postgres inside a trusted range
			netip.MustParseAddrPort("0.0.0.0:6379"),   // Redis on every address
			netip.MustParseAddrPort("[::]:9090"),      // metrics
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	untrusted, err := NewRanges(RangesConfig{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		r    *Ranges
		ap   string
		want string // a word of the refusal, or "" for allowed
	}{
		{"public v4", untrusted, "192.0.2.10:443", ""},
		{"public v6", untrusted, "[2001:db8::10]:443", ""},
		{"metadata", untrusted, "169.254.169.254:80", "metadata"},
		{"metadata mapped", untrusted, "[::ffff:169.254.169.254]:80", "metadata"},
		{"metadata v6", untrusted, "[fd00:ec2::254]:80", "metadata"},
		{"link-local", untrusted, "169.254.1.1:80", "link-local"},
		{"rfc1918 10", untrusted, "10.0.0.5:443", "RFC 1918"},
		{"rfc1918 172", untrusted, "172.31.255.255:443", "RFC 1918"},
		{"rfc1918 192", untrusted, "192.168.1.1:443", "RFC 1918"},
		{"rfc1918 mapped", untrusted, "[::ffff:10.0.0.5]:443", "RFC 1918"},
		{"cgnat", untrusted, "100.64.0.1:443", "carrier-grade NAT"},
		{"cgnat top", untrusted, "100.127.255.254:443", "carrier-grade NAT"},
		{"just past cgnat", untrusted, "100.128.0.1:443", ""},
		{"loopback", untrusted, "127.0.0.1:443", "loopback"},
		{"loopback 127/8", untrusted, "127.5.6.7:443", "loopback"},
		{"loopback v6", untrusted, "[::1]:443", "loopback"},
		{"unspecified", untrusted, "0.0.0.0:443", "unspecified"},
		{"unspecified v6", untrusted, "[::]:443", "unspecified"},
		{"ula", untrusted, "[fd12:3456::1]:443", "unique local"},
		{"v6 link-local", untrusted, "[fe80::1]:443", "link-local"},
		{"multicast", untrusted, "224.0.0.251:5353", "multicast"},
		{"v6 multicast", untrusted, "[ff02::fb]:5353", "multicast"},
		{"broadcast", untrusted, "255.255.255.255:9", "reserved"},
		{"nat64 private", untrusted, "[64:ff9b::a00:5]:443", "NAT64"},
		{"nat64 public", untrusted, "[64:ff9b::c000:20a]:443", ""},
		{"cluster", r, "10.100.0.1:443", "cluster"},
		{"cluster non-rfc1918", r, "198.19.9.9:443", "cluster"},
		{"trusted loopback", r, "127.0.0.1:3000", ""},
		{"trusted private", r, "10.20.1.1:443", ""},
		{"trusted inside cluster", r, "198.19.5.5:443", ""},
		{"private outside trust", r, "10.21.0.1:443", "RFC 1918"},
		{"own api in trusted range", r, "127.0.0.1:8080", "own listeners"},
		{"own api other loopback", r, "127.0.0.2:8080", ""},
		{"own postgres in trusted range", r, "10.20.0.5:5432", "own listeners"},
		{"own unspecified listener", r, "127.0.0.9:6379", "own listeners"},
		{"own unspecified listener mapped", r, "[::ffff:127.0.0.9]:6379", "own listeners"},
		{"own v6 unspecified listener", r, "10.20.3.3:9090", "own listeners"},
		{"unspecified listener's port on public", r, "192.0.2.10:6379", ""},
		{"zone", untrusted, "[fe80::1%eth0]:443", "zone"},
	}
	for _, tt := range tests {
		got := tt.r.Check(netip.MustParseAddrPort(tt.ap))
		if tt.want == "" && got != "" || tt.want != "" && !strings.Contains(got, tt.want) {
			t.Errorf("%s: Check(%s) = %q, want %q", tt.name, tt.ap, got, tt.want)
		}
	}
}

func TestNewRangesRejects(t *testing.T) {
	t.Parallel()
	bad := []RangesConfig{
		{Cluster: []netip.Prefix{netip.MustParsePrefix("10.0.0.1/8")}},
		{Trust: []netip.Prefix{{}}},
		{Own: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:0")}},
	}
	for i, c := range bad {
		if _, err := NewRanges(c); err == nil {
			t.Errorf("config %d accepted: %+v", i, c)
		}
	}
}

func FuzzRangesCheck(f *testing.F) {
	f.Add([]byte{127, 0, 0, 1}, uint16(80))
	f.Add([]byte{0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 1}, uint16(443))
	r, err := NewRanges(RangesConfig{Own: []netip.AddrPort{netip.MustParseAddrPort("0.0.0.0:6379")}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte, port uint16) {
		addr, ok := netip.AddrFromSlice(b)
		if !ok {
			return
		}
		got := r.Check(netip.AddrPortFrom(addr, port))
		// The mapped and the plain form of an IPv4 address are one
		// destination and get one answer.
		if addr.Is4() {
			mapped := netip.AddrFrom16(addr.As16())
			if m := r.Check(netip.AddrPortFrom(mapped, port)); m != got {
				t.Fatalf("Check(%s) = %q but Check(%s) = %q", addr, got, mapped, m)
			}
		}
		// Nothing private passes an empty trust list.
		u := addr.Unmap()
		if got == "" && (u.IsLoopback() || u.IsPrivate() || u.IsLinkLocalUnicast() || u.IsMulticast() || u.IsUnspecified()) {
			t.Fatalf("Check(%s) allowed an internal address", addr)
		}
	})
}
