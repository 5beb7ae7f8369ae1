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
