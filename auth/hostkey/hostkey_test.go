package hostkey

import (
	"bytes"
	"path/filepath"
	"testing"

	"golang.org/x/crypto/ssh"
)

func TestKeyIsStablePerSandboxAndDistinctAcross(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secret")
	d1, err := LoadOrCreate(path)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := LoadOrCreate(path) // same secret read back
	if err != nil {
		t.Fatal(err)
	}
	privA1, pubA1, err := d1.Key("sbx-a")
	if err != nil {
		t.Fatal(err)
	}
	privA2, pubA2, _ := d2.Key("sbx-a")
	_, pubB, _ := d1.Key("sbx-b")
	// The PEM encoding carries a random check word, so compare keys.
	s1, _ := ssh.ParsePrivateKey(privA1)
	s2, _ := ssh.ParsePrivateKey(privA2)
	if pubA1 != pubA2 || !bytes.Equal(s1.PublicKey().Marshal(), s2.PublicKey().Marshal()) {
		t.Fatalf("same sandbox, same secret: keys differ: %s vs %s", pubA1, pubA2)
	}
	if pubA1 == pubB {
		t.Fatalf("two sandboxes share host key %s", pubB)
	}
	signer, err := ssh.ParsePrivateKey(privA1)
	if err != nil {
		t.Fatalf("private PEM does not parse: %v", err)
	}
	got := string(bytes.TrimSpace(ssh.MarshalAuthorizedKey(signer.PublicKey())))
	if got != pubA1 {
		t.Fatalf("public key of PEM = %q, want %q", got, pubA1)
	}
	other, _ := New(bytes.Repeat([]byte{7}, 32))
	if _, pubOther, _ := other.Key("sbx-a"); pubOther == pubA1 {
		t.Fatalf("different secrets derived the same key")
	}
}

func TestShortSecretRefused(t *testing.T) {
	if _, err := New(make([]byte, 16)); err == nil {
		t.Fatal("New accepted a 16-byte secret")
	}
}

func TestBytesSeparatesPurposes(t *testing.T) {
	secret := make([]byte, 32)
	d, err := New(secret)
	if err != nil {
		t.Fatal(err)
	}
	a1, _ := d.Bytes("sbx grant token v1 grt-a", 32)
	a2, _ := d.Bytes("sbx grant token v1 grt-a", 32)
	b, _ := d.Bytes("sbx grant token v1 grt-b", 32)
	if !bytes.Equal(a1, a2) || bytes.Equal(a1, b) || len(a1) != 32 {
		t.Fatalf("Bytes: same info gave %x and %x, other info %x; want stable and distinct", a1, a2, b)
	}
	other, _ := New(append([]byte{1}, secret[1:]...))
	c, _ := other.Bytes("sbx grant token v1 grt-a", 32)
	if bytes.Equal(a1, c) {
		t.Fatal("another secret derived the same bytes")
	}
}
