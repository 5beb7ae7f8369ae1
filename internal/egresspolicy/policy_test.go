package egresspolicy

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestParseEntry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string // want "" means an error
	}{
		{"github.com", "github.com"},
		{"GitHub.COM.", "github.com"},
		{"*.npmjs.org:443", "*.npmjs.org:443"},
		{"registry.npmjs.org:443", "registry.npmjs.org:443"},
		{"_acme.example.com", "_acme.example.com"},
		{"203.0.113.7", "203.0.113.7"},
		{"203.0.113.7:22", "203.0.113.7:22"},
		{"203.0.113.0/24", "203.0.113.0/24"},
		{"203.0.113.0/24:5432", "203.0.113.0/24:5432"},
		{"2001:db8::1", "2001:db8::1"},
		{"[2001:db8::1]:443", "[2001:db8::1]:443"},
		{"[2001:db8::1]", "2001:db8::1"},
		{"2001:db8::/32", "2001:db8::/32"},
		{"::ffff:203.0.113.7", "203.0.113.7"},
		{"", ""},
		{"*", ""},
		{"*.com", ""},
		{"**.example.com", ""},
		{"a.*.example.com", ""},
		{"*.*.example.com", ""},
		{"example.*", ""},
		{"ex ample.com", ""},
		{"example.com:0", ""},
		{"example.com:65536", ""},
		{"example.com:080", ""},
		{"example.com:", ""},
		{"example.com:https", ""},
		{"-a.example.com", ""},
		{"a..example.com", ""},
		{".example.com", ""},
		{"http://example.com", ""},
		{"example.com/path", ""},
		{"203.0.113.1/24", ""},
		{"203.0.113.0/33", ""},
		{"[example.com]:443", ""},
		{"[2001:db8::1", ""},
		{"[2001:db8::1]x", ""},
		{"fe80::1%eth0", ""},
		{"2001:db8::g", ""},
		{strings.Repeat("a", 64) + ".com", ""},
		{strings.Repeat("a.", 150) + "com", ""},
	}
	for _, tt := range tests {
		e, err := ParseEntry(tt.in)
		switch {
		case tt.want == "" && err == nil:
			t.Errorf("ParseEntry(%q) = %q, want an error", tt.in, e)
		case tt.want != "" && err != nil:
			t.Errorf("ParseEntry(%q): %v, want %q", tt.in, err, tt.want)
		case tt.want != "" && e.String() != tt.want:
			t.Errorf("ParseEntry(%q) = %q, want %q", tt.in, e, tt.want)
		}
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		spec  Spec
		field string // "" means valid
	}{
		{"open", Spec{Egress: Open}, ""},
		{"none", Spec{Egress: None}, ""},
		{"empty allowlist", Spec{Egress: Allowlist}, ""},
		{"allowlist", Spec{Egress: Allowlist, Allow: []string{"github.com", "*.npmjs.org:443"}}, ""},
		{"unknown mode", Spec{Egress: "closed"}, "egress"},
		{"no mode", Spec{}, "egress"},
		{"open with entries", Spec{Egress: Open, Allow: []string{"github.com"}}, "allow"},
		{"bad entry named", Spec{Egress: Allowlist, Allow: []string{"github.com", "*.com"}}, "allow[1]"},
		{"duplicate", Spec{Egress: Allowlist, Allow: []string{"github.com", "GITHUB.com."}}, "allow[1]"},
		{"too many", Spec{Egress: Allowlist, Allow: make([]string, MaxEntries+1)}, "allow"},
	}
	for _, tt := range tests {
		_, err := Parse(tt.spec)
		var pe *Error
		switch {
		case tt.field == "" && err != nil:
			t.Errorf("%s: Parse: %v", tt.name, err)
		case tt.field != "" && !errors.As(err, &pe):
			t.Errorf("%s: Parse error %v, want an *Error on %s", tt.name, err, tt.field)
		case tt.field != "" && pe.Field != tt.field:
			t.Errorf("%s: Parse error on %q (%v), want %q", tt.name, pe.Field, err, tt.field)
		}
	}
}

func TestAllows(t *testing.T) {
	t.Parallel()
	list := MustParse(Spec{Egress: Allowlist, Allow: []string{
		"github.com", "*.npmjs.org:443", "203.0.113.0/24", "[2001:db8::1]:22", "198.51.100.9:8080",
	}})
	tests := []struct {
		name   string
		p      *Policy
		host   string
		port   uint16
		dialed string // the address the gateway would dial
		want   bool
	}{
		{"exact name", list, "github.com", 443, "192.0.2.1", true},
		{"exact name any port", list, "github.com", 22, "192.0.2.1", true},
		{"name case and dot", list, "GitHub.com.", 443, "192.0.2.1", true},
		{"subdomain of exact", list, "api.github.com", 443, "192.0.2.1", false},
		{"suffix lookalike", list, "evilgithub.com", 443, "192.0.2.1", false},
		{"wildcard one label", list, "registry.npmjs.org", 443, "192.0.2.1", true},
		{"wildcard two labels", list, "a.b.npmjs.org", 443, "192.0.2.1", true},
		{"wildcard apex", list, "npmjs.org", 443, "192.0.2.1", false},
		{"wildcard wrong port", list, "registry.npmjs.org", 80, "192.0.2.1", false},
		{"wildcard lookalike", list, "registry.xnpmjs.org", 443, "192.0.2.1", false},
		{"cidr literal", list, "203.0.113.77", 443, "203.0.113.77", true},
		{"cidr mapped literal", list, "::ffff:203.0.113.77", 443, "203.0.113.77", true},
		{"cidr name resolved inside", list, "cdn.example", 443, "203.0.113.5", true},
		{"cidr name resolved outside", list, "cdn.example", 443, "192.0.2.5", false},
		{"ip outside", list, "192.0.2.5", 443, "192.0.2.5", false},
		{"v6 with port", list, "[2001:db8::1]", 22, "2001:db8::1", true},
		{"v6 wrong port", list, "2001:db8::1", 23, "2001:db8::1", false},
		{"ip port", list, "198.51.100.9", 8080, "198.51.100.9", true},
		{"ip wrong port", list, "198.51.100.9", 80, "198.51.100.9", false},
		{"name never matches ip entry literally", list, "203.0.113.github.com", 443, "192.0.2.1", false},
		{"open", MustParse(Spec{Egress: Open}), "example.com", 443, "192.0.2.1", true},
		{"none", MustParse(Spec{Egress: None}), "github.com", 443, "192.0.2.1", false},
		{"empty allowlist", MustParse(Spec{Egress: Allowlist}), "github.com", 443, "192.0.2.1", false},
	}
	for _, tt := range tests {
		target, err := ParseTarget(tt.host, tt.port)
		if err != nil {
			t.Fatalf("%s: ParseTarget(%q): %v", tt.name, tt.host, err)
		}
		if got := tt.p.Allows(target, netip.MustParseAddr(tt.dialed)); got != tt.want {
			t.Errorf("%s: Allows(%s, %s) = %v, want %v", tt.name, target, tt.dialed, got, tt.want)
		}
	}
}

func TestParseTargetRejects(t *testing.T) {
	t.Parallel()
	for _, host := range []string{"", "*.example.com", "a b", "fe80::1%eth0", "example..com"} {
		if tg, err := ParseTarget(host, 443); err == nil {
			t.Errorf("ParseTarget(%q) = %v, want an error", host, tg)
		}
	}
	if _, err := ParseTarget("example.com", 0); err == nil {
		t.Error("ParseTarget with port 0 accepted")
	}
}

func TestNarrows(t *testing.T) {
	t.Parallel()
	allow := func(entries ...string) *Policy {
		return MustParse(Spec{Egress: Allowlist, Allow: entries})
	}
	open, none := MustParse(Spec{Egress: Open}), MustParse(Spec{Egress: None})
	parent := allow("github.com", "*.npmjs.org", "*.pypi.org:443", "10.1.0.0/16", "203.0.113.0/24:443")
	tests := []struct {
		name          string
		child, parent *Policy
		field         string // "" means it narrows
		mentions      string
	}{
		{"none under open", none, open, "", ""},
		{"none under none", none, none, "", ""},
		{"none under allowlist", none, parent, "", ""},
		{"open under open", open, open, "", ""},
		{"allowlist under open", allow("example.com"), open, "", ""},
		{"same list", parent, parent, "", ""},
		{"empty list", allow(), parent, "", ""},
		{"exact under exact", allow("github.com:443"), parent, "", ""},
		{"name under wildcard", allow("registry.npmjs.org:443"), parent, "", ""},
		{"wildcard under wildcard", allow("*.cdn.npmjs.org"), parent, "", ""},
		{"port under any port", allow("*.npmjs.org:443"), parent, "", ""},
		{"cidr under cidr", allow("10.1.2.0/24", "10.1.2.3:5432"), parent, "", ""},
		{"cidr port under cidr port", allow("203.0.113.8:443"), parent, "", ""},
		{"open under allowlist", open, parent, "egress", "github.com"},
		{"open under none", open, none, "egress", "no egress"},
		{"allowlist under none", allow(), none, "egress", ""},
		{"other name", allow("github.com", "example.com"), parent, "allow[1]", "example.com"},
		{"subdomain of exact", allow("api.github.com"), parent, "allow[0]", "api.github.com"},
		{"wildcard apex", allow("npmjs.org"), parent, "allow[0]", "npmjs.org"},
		{"wildcard over exact", allow("*.github.com"), parent, "allow[0]", "*.github.com"},
		{"any port under one port", allow("files.pypi.org"), parent, "allow[0]", "files.pypi.org"},
		{"other port", allow("files.pypi.org:80"), parent, "allow[0]", ""},
		{"wider cidr", allow("10.0.0.0/8"), parent, "allow[0]", "10.0.0.0/8"},
		{"cidr any port under port", allow("203.0.113.8"), parent, "allow[0]", ""},
		{"name under cidr", allow("db.internal"), allow("10.0.0.0/8"), "allow[0]", ""},
		{"v6 not under v4", allow("::ffff:10.1.0.0/112"), allow("2001:db8::/32"), "allow[0]", ""},
	}
	for _, tt := range tests {
		err := Narrows(tt.child, tt.parent)
		var pe *Error
		switch {
		case tt.field == "" && err != nil:
			t.Errorf("%s: Narrows: %v", tt.name, err)
		case tt.field != "" && !errors.As(err, &pe):
			t.Errorf("%s: Narrows = %v, want an *Error on %s", tt.name, err, tt.field)
		case tt.field != "" && pe.Field != tt.field:
			t.Errorf("%s: Narrows error on %q (%v), want %q", tt.name, pe.Field, err, tt.field)
		case tt.field != "" && !strings.Contains(err.Error(), tt.mentions):
			t.Errorf("%s: Narrows error %q does not mention %q", tt.name, err, tt.mentions)
		}
	}
}

func TestRefusal(t *testing.T) {
	t.Parallel()
	p := MustParse(Spec{Egress: Allowlist, Allow: []string{"github.com", "*.npmjs.org:443"}})
	target, _ := ParseTarget("example.com", 443)
	want := "example.com:443 is not in this sandbox's allowlist; allowed: github.com, *.npmjs.org:443"
	if got := p.Refusal(target); got != want {
		t.Errorf("Refusal = %q, want %q", got, want)
	}
	if got := MustParse(Spec{Egress: None}).Refusal(target); !strings.Contains(got, "allows no egress") {
		t.Errorf("none's Refusal = %q, want it to say no egress is allowed", got)
	}
}

func FuzzParseEntry(f *testing.F) {
	for _, s := range []string{"github.com", "*.npmjs.org:443", "10.0.0.0/8:22", "[2001:db8::1]:443", "2001:db8::/32", "a.*.b", "[::1]x", ":", "*.", "1.2.3.4/"} {
		f.Add(s, "a.npmjs.org", uint16(443))
	}
	f.Fuzz(func(t *testing.T, entry, host string, port uint16) {
		e, err := ParseEntry(entry)
		if err != nil {
			return
		}
		// The canonical form parses back to itself.
		e2, err := ParseEntry(e.String())
		if err != nil || e2.String() != e.String() {
			t.Fatalf("ParseEntry(%q).String() = %q, which parses to %q, %v", entry, e, e2, err)
		}
		// An entry covers itself, and a policy narrows itself.
		if !e.covers(e) {
			t.Fatalf("entry %q does not cover itself", e)
		}
		p := MustParse(Spec{Egress: Allowlist, Allow: []string{entry}})
		if err := Narrows(p, p); err != nil {
			t.Fatalf("%q does not narrow itself: %v", entry, err)
		}
		target, err := ParseTarget(host, port)
		if err != nil {
			return
		}
		// A target the entry matches is matched by its canonical form.
		if e.matchesTarget(target) != e2.matchesTarget(target) {
			t.Fatalf("%q and its canonical form %q disagree on %s", entry, e2, target)
		}
		// A wildcard never matches its own apex.
		if e.wildcard && target.Name == e.name {
			if e.matchesTarget(target) {
				t.Fatalf("wildcard %q matched its apex %s", entry, target)
			}
		}
	})
}
