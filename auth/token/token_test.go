package token

import (
	"bytes"
	"strings"
	"testing"
)

func TestNewParsesAndHashes(t *testing.T) {
	for _, prefix := range []string{PrefixAgent, PrefixProject, PrefixGrant, PrefixProxy} {
		secret, hash := New(prefix)
		got, err := Parse(secret)
		if err != nil || got != prefix {
			t.Fatalf("Parse(%q) = %q, %v; want %q", secret, got, err, prefix)
		}
		if !bytes.Equal(Hash(secret), hash) {
			t.Fatalf("Hash(%q) differs from the hash New returned", secret)
		}
	}
	a, _ := New(PrefixAgent)
	b, _ := New(PrefixAgent)
	if a == b {
		t.Fatal("two tokens are equal")
	}
}

func TestParseRejects(t *testing.T) {
	good, _ := New(PrefixAgent)
	for name, in := range map[string]string{
		"empty":        "",
		"no prefix":    strings.TrimPrefix(good, PrefixAgent),
		"short":        good[:len(good)-1],
		"long":         good + "A",
		"bad alphabet": good[:len(good)-1] + "*",
		"other prefix": "ghp_" + strings.TrimPrefix(good, PrefixAgent),
	} {
		if _, err := Parse(in); err == nil {
			t.Errorf("%s: Parse(%q) accepted", name, in)
		}
	}
}

func FuzzParse(f *testing.F) {
	good, _ := New(PrefixGrant)
	f.Add(good)
	f.Add("sbx_at_")
	f.Add("sbx_pt_" + strings.Repeat("A", 43))
	f.Fuzz(func(t *testing.T, s string) {
		p, err := Parse(s)
		if err == nil && !strings.HasPrefix(s, p) {
			t.Fatalf("Parse(%q) = %q without that prefix", s, p)
		}
	})
}
