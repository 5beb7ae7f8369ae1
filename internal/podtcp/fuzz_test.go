package podtcp

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"io"
	"net"
	"reflect"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// fuzzSigner is a fixed ed25519 key from seed: the fuzzers' keys are the
// same on every run, so a corpus entry means the same thing each time.
func fuzzSigner(t testing.TB, seed byte) ssh.Signer {
	t.Helper()
	s, err := ssh.NewSignerFromKey(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// frame is msg as it goes on the wire.
func frame(msg any) []byte {
	var b bytes.Buffer
	_ = writeFrame(&b, msg)
	return b.Bytes()
}

// FuzzReadFrame: any bytes, read as the forwarder's reply (what the edge
// reads from inside a tenant's sandbox) and as the edge's hello (what
// the forwarder reads from whoever reaches its port), never panic; a
// frame accepted was at most maxFrame, was read exactly (the bytes after
// it, which belong to the stream, are left unread), and encodes again to
// what decodes to the same message.
func FuzzReadFrame(f *testing.F) {
	f.Add(frame(&reply{Status: statusOpen, Sig: []byte("sig")}))
	f.Add(append(frame(&reply{Status: statusRefused}), "GET / HTTP/1.1\r\n"...))
	f.Add(frame(&hello{Cert: []byte("c"), Port: 8080, Nonce: make([]byte, nonceSize), Sig: []byte("s"), HostKey: []byte("k")}))
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1})
	f.Add([]byte{0, 0, 0, 8, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 3, 1, 2})
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, msg := range []any{&reply{}, &hello{}} {
			r := bytes.NewReader(data)
			if err := readFrame(r, msg); err != nil {
				continue
			}
			size := int(binary.BigEndian.Uint32(data))
			if size > maxFrame || r.Len() != len(data)-4-size {
				t.Fatalf("frame of %d bytes accepted, %d of %d bytes left unread", size, r.Len(), len(data))
			}
			again := reflect.New(reflect.TypeOf(msg).Elem()).Interface()
			if err := readFrame(bytes.NewReader(frame(msg)), again); err != nil || !reflect.DeepEqual(msg, again) {
				t.Fatalf("%#v encoded again reads as %#v, %v", msg, again, err)
			}
		}
	})
}

// FuzzHandshakeReply: the edge's side of the handshake against a
// forwarder that sends anything (data is its whole side of the stream,
// greeting included) never panics and never succeeds: only the pinned
// host key can sign the reply over the edge's fresh nonce.
func FuzzHandshakeReply(f *testing.F) {
	greeting := append([]byte(magic), make([]byte, nonceSize)...)
	f.Add(greeting)
	f.Add(append(greeting, frame(&reply{Status: statusOpen})...))
	f.Add(append(greeting, frame(&reply{Status: statusOther, Sig: ssh.Marshal(&ssh.Signature{Format: ssh.KeyAlgoED25519, Blob: make([]byte, 64)})})...))
	f.Add(append(greeting, frame(&reply{Status: statusRefused, Sig: ssh.Marshal(&ssh.Signature{Format: ssh.KeyAlgoRSA, Blob: []byte{1}})})...))
	f.Add(append(greeting, 0, 0, 0x20, 1))
	f.Add([]byte("SSH-2.0-OpenSSH_9.6\r\n"))
	f.Add([]byte{})
	edge, pinned := fuzzSigner(f, 1), fuzzSigner(f, 2).PublicKey()
	f.Fuzz(func(t *testing.T, data []byte) {
		c, fwd := net.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			go func() { _, _ = io.Copy(io.Discard, fwd) }() // the edge's hello
			_, _ = fwd.Write(data)
			_ = fwd.Close()
		}()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		err := handshake(c, edge, pinned, 8080)
		_ = c.Close()
		<-done
		if err == nil {
			t.Fatalf("handshake succeeded against %q", data)
		}
	})
}

// FuzzCheckHello: the forwarder refuses any hello that is not signed, over
// this connection's fresh nonce, by the holder of a user certificate from
// its CA for its principal; the fuzzer holds no such key, so every hello
// is refused, without a panic.
func FuzzCheckHello(f *testing.F) {
	ca, host, user := fuzzSigner(f, 3), fuzzSigner(f, 4), fuzzSigner(f, 5)
	cert := &ssh.Certificate{Key: user.PublicKey(), CertType: ssh.UserCert, KeyId: "edge", ValidPrincipals: []string{"sandbox"},
		ValidBefore: ssh.CertTimeInfinity}
	if err := cert.SignCert(rand.Reader, ca); err != nil {
		f.Fatal(err)
	}
	stranger := *cert
	if err := stranger.SignCert(rand.Reader, user); err != nil {
		f.Fatal(err)
	}
	nonce := make([]byte, nonceSize)
	sig, err := sign(user, transcript{Domain: domainClient, ServerNonce: nonce, ClientNonce: nonce, Port: 8080, HostKey: host.PublicKey().Marshal()}.bytes())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(cert.Marshal(), uint32(8080), nonce, sig, host.PublicKey().Marshal())
	f.Add(stranger.Marshal(), uint32(8080), nonce, sig, host.PublicKey().Marshal())
	f.Add(user.PublicKey().Marshal(), uint32(1), nonce, sig, []byte{})
	f.Add([]byte{}, uint32(0), []byte{}, []byte{}, []byte{})
	f.Add(cert.Marshal(), uint32(65536), nonce[:31], sig, host.PublicKey().Marshal())
	keys := Keys{HostKey: host, UserCAs: []ssh.PublicKey{ca.PublicKey()}, Principal: "sandbox"}
	fw := &Forwarder{Now: time.Now}
	f.Fuzz(func(t *testing.T, certWire []byte, port uint32, clientNonce, sig, hostKey []byte) {
		ns, err := newNonce()
		if err != nil {
			t.Fatal(err)
		}
		h := &hello{Cert: certWire, Port: port, Nonce: clientNonce, Sig: sig, HostKey: hostKey}
		if err := fw.checkHello(keys, ns, h); err == nil {
			t.Fatalf("hello %+v accepted against a fresh nonce", h)
		}
	})
}
