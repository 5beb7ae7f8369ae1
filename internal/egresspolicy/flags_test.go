package egresspolicy

import (
	"flag"
	"io"
	"testing"
)

func TestFlags(t *testing.T) {
	t.Parallel()
	var trust PrefixList
	var own AddrPortList
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Var(&trust, "trust", "")
	fs.Var(&own, "own", "")
	if err := fs.Parse([]string{"-trust", "10.1.0.0/16, 127.0.0.1", "-trust", "::1", "-own", "127.0.0.1:5432,[::1]:6379"}); err != nil {
		t.Fatal(err)
	}
	if got, want := trust.String(), "10.1.0.0/16,127.0.0.1/32,::1/128"; got != want {
		t.Errorf("trust = %q, want %q", got, want)
	}
	if got, want := own.String(), "127.0.0.1:5432,[::1]:6379"; got != want {
		t.Errorf("own = %q, want %q", got, want)
	}
	for _, bad := range []string{"10.1.0.1/16", "example.com", "10.0.0.0/33", "fe80::1%eth0"} {
		var l PrefixList
		if err := l.Set(bad); err == nil {
			t.Errorf("PrefixList.Set(%q) accepted", bad)
		}
	}
	for _, bad := range []string{"127.0.0.1", "127.0.0.1:0", "localhost:5432"} {
		var l AddrPortList
		if err := l.Set(bad); err == nil {
			t.Errorf("AddrPortList.Set(%q) accepted", bad)
		}
	}
}
