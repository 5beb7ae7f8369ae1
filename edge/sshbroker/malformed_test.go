package sshbroker

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// injectConn lets a test write raw bytes into an established SSH
// connection between the client's own packets.
type injectConn struct {
	net.Conn
	mu sync.Mutex
}

func (c *injectConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *injectConn) inject(p []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.Conn.Write(p)
	return err
}

// TestMalformedInputClosesOnlyThatConnection feeds the broker protocol
// garbage at each stage while a bulk transfer runs on another connection,
// and checks each bad connection is closed promptly (not by the handshake
// timeout) and the good one is untouched.
func TestMalformedInputClosesOnlyThatConnection(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.HandshakeTimeout = 20 * time.Second })
	k := e.grant("alpha", nil)

	good, err := dialGo(e.addr, "127.0.0.1", "alpha", k.signer)
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	// A 64 MiB round trip through the good connection runs throughout.
	const size = 64 << 20
	sess, err := good.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	stdin, _ := sess.StdinPipe()
	stdout, _ := sess.StdoutPipe()
	if err := sess.Start("cat"); err != nil {
		t.Fatal(err)
	}
	sent := sha256.New()
	got := sha256.New()
	copied := make(chan error, 2)
	go func() {
		_, err := io.Copy(io.MultiWriter(stdin, sent), io.LimitReader(rand.Reader, size))
		stdin.Close()
		copied <- err
	}()
	go func() {
		_, err := io.Copy(got, stdout)
		copied <- err
	}()

	badLength := binary.BigEndian.AppendUint32(nil, 0xFFFFFFFF)
	badPadding := append(binary.BigEndian.AppendUint32(nil, 12), 200) // padding longer than the packet
	junk := make([]byte, 4096)
	rand.Read(junk)
	cases := []struct {
		name  string
		input []byte
	}{
		// Lines before the version are legal (RFC 4253 4.2) and x/crypto
		// skips a bounded number of them; a short HTTP request is therefore
		// held until the handshake timeout, a long stream of lines is not.
		{"endless non-SSH lines", bytes.Repeat([]byte("GET / HTTP/1.1\r\n"), 2000)},
		{"garbage after version", append([]byte("SSH-2.0-evil\r\n"), junk...)},
		{"bad packet length", append([]byte("SSH-2.0-evil\r\n"), append(badLength, junk[:64]...)...)},
		{"bad padding length", append([]byte("SSH-2.0-evil\r\n"), append(badPadding, junk[:16]...)...)},
		{"overlong version line", bytes.Repeat([]byte("S"), 300<<10)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := net.Dial("tcp", e.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			start := time.Now()
			go nc.Write(tc.input) // may fail once the broker hangs up mid-write
			waitClosed(t, nc, start)
		})
	}

	t.Run("garbage inside an authenticated connection", func(t *testing.T) {
		raw, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		ic := &injectConn{Conn: raw}
		conn, chans, reqs, err := ssh.NewClientConn(ic, e.addr, &ssh.ClientConfig{
			User: "alpha", Auth: []ssh.AuthMethod{ssh.PublicKeys(k.signer)},
			HostKeyCallback: ssh.InsecureIgnoreHostKey(),
		})
		if err != nil {
			t.Fatal(err)
		}
		c := ssh.NewClient(conn, chans, reqs)
		defer c.Close()
		mustEcho(t, c, "before", "before injection")
		start := time.Now()
		if err := ic.inject(junk[:256]); err != nil { // fails the MAC of the "next packet"
			t.Fatal(err)
		}
		waited := make(chan struct{})
		go func() { c.Wait(); close(waited) }()
		select {
		case <-waited:
			t.Logf("closed after %v", time.Since(start).Round(time.Millisecond))
		case <-time.After(5 * time.Second):
			t.Fatal("the broker kept a connection whose packets fail their MAC")
		}
	})

	for range 2 {
		if err := <-copied; err != nil {
			t.Fatalf("bulk transfer on the good connection: %v", err)
		}
	}
	if err := sess.Wait(); err != nil {
		t.Fatalf("good session: %v", err)
	}
	if !bytes.Equal(sent.Sum(nil), got.Sum(nil)) {
		t.Fatal("good connection's 64 MiB came back different")
	}
	mustEcho(t, good, "after", "good connection after the attacks")
}

// mustEcho runs `echo word` on c and fails the test, saying when, unless
// word comes back.
func mustEcho(t *testing.T, c *ssh.Client, word, when string) {
	t.Helper()
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := s.Output("echo " + word); err != nil || string(out) != word+"\n" {
		t.Fatalf("%s: %q %v", when, out, err)
	}
}

// waitClosed reads until the broker closes nc, and fails if that took
// anywhere near the handshake timeout.
func waitClosed(t *testing.T, nc net.Conn, start time.Time) {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, nc)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the broker kept the malformed connection open")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("closed after %v; want a prompt close, not the handshake timeout", d)
	}
}
