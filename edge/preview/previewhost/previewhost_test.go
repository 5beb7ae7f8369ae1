package previewhost

import (
	"net"
	"strings"
	"testing"
)

const domain = "preview.example.com"

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		host        string
		kind        Kind
		label, port string
	}{
		{"abc123.preview.example.com", Preview, "abc123", ""},
		{"ABC123.Preview.Example.COM:8443", Preview, "abc123", "8443"},
		{"abc123.preview.example.com.", Preview, "abc123", ""},
		{"preview.example.com", Apex, "", ""},
		{"preview.example.com:80", Apex, "", "80"},
		{"a.b.preview.example.com", Invalid, "", ""},
		{".preview.example.com", Invalid, "", ""},
		{"-a.preview.example.com", Invalid, "", ""},
		{"a_b.preview.example.com", Invalid, "", ""},
		{"abcpreview.example.com", Invalid, "", ""},
		{"abc.preview.example.com.evil.com", Invalid, "", ""},
		{"example.com", Invalid, "", ""},
		{"127.0.0.1", Invalid, "", ""},
		{"127.0.0.1:8080", Invalid, "", ""},
		{"[::1]:8080", Invalid, "", ""},
		{"::1", Invalid, "", ""},
		{"abc.preview.example.com:0", Invalid, "", ""},
		{"abc.preview.example.com:99999", Invalid, "", ""},
		{"abc.preview.example.com:", Invalid, "", ""},
		{"abc.preview.example.com:80:80", Invalid, "", ""},
		{"ábc.preview.example.com", Invalid, "", ""},
		{"", Invalid, "", ""},
		{strings.Repeat("a", 64) + ".preview.example.com", Invalid, "", ""},
	} {
		kind, label, port := Parse(tc.host, domain)
		if kind != tc.kind || label != tc.label || port != tc.port {
			t.Errorf("Parse(%q) = %v %q %q, want %v %q %q", tc.host, kind, label, port, tc.kind, tc.label, tc.port)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"abc.preview.example.com", "preview.example.com:1", "[::1]", "a.b.preview.example.com", "1.2.3.4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		kind, label, port := Parse(host, domain)
		switch kind {
		case Preview:
			if !validLabel(label) || strings.Contains(label, ".") {
				t.Fatalf("Parse(%q): bad label %q", host, label)
			}
		case Apex:
			if label != "" {
				t.Fatalf("Parse(%q): apex with label %q", host, label)
			}
		case Invalid:
			if label != "" || port != "" {
				t.Fatalf("Parse(%q): invalid with label %q port %q", host, label, port)
			}
		}
		if port != "" && !validPort(port) {
			t.Fatalf("Parse(%q): bad port %q", host, port)
		}
	})
}

// TestIPv4CharsCoversParseIP: every name net.ParseIP takes without a
// colon is one ipv4Chars lets through to it.
func TestIPv4CharsCoversParseIP(t *testing.T) {
	for _, name := range []string{"127.0.0.1", "10.1.2.3", "1.2.3.4", "0.0.0.0", "255.255.255.255", "bench.preview.localhost", "1e.2.3.4", "1.2.3.4a", "a1.2.3.4", ""} {
		if net.ParseIP(name) != nil && !ipv4Chars(name) {
			t.Errorf("ipv4Chars(%q) = false for an address net.ParseIP takes", name)
		}
	}
	for _, host := range []string{"127.0.0.1", "127.0.0.1:8080", "10.0.0.1."} {
		if k, _, _ := Parse(host, "preview.example.com"); k != Invalid {
			t.Errorf("Parse(%q) = %v, want Invalid", host, k)
		}
	}
}
