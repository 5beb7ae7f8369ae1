package podtcp

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/auth/sshca"
	"github.com/sbxedge/sbx/internal/testkit/closedport"
	"github.com/sbxedge/sbx/internal/testkit/waitfor"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sandbox is one forwarder with its keys, and a log of its refusals.
type sandbox struct {
	ca      *sshca.CA
	host    ssh.Signer
	addr    string
	user    string
	logs    *syncBuffer
	keys    Keys
	keysMu  sync.Mutex
	timeout time.Duration
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newCA(t testing.TB) *sshca.CA {
	t.Helper()
	ca, _, err := sshca.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func newKey(t testing.TB) ssh.Signer {
	t.Helper()
	_, s, err := sshca.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// startSandbox runs a forwarder on 127.0.0.1:0 until the test ends.
func startSandbox(t testing.TB) *sandbox {
	t.Helper()
	sb := &sandbox{ca: newCA(t), host: newKey(t), user: "sbx", logs: &syncBuffer{}, timeout: 10 * time.Second}
	sb.keys = Keys{HostKey: sb.host, UserCAs: []ssh.PublicKey{sb.ca.PublicKey()}, Principal: sb.user}
	f := &Forwarder{
		Keys: func() (Keys, error) {
			sb.keysMu.Lock()
			defer sb.keysMu.Unlock()
			return sb.keys, nil
		},
		Logger:           slog.New(slog.NewTextHandler(sb.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		HandshakeTimeout: sb.timeout,
	}
	sb.addr, _ = serve(t, f)
	return sb
}

// serve runs f on 127.0.0.1 until the test ends and returns its address;
// stop ends it sooner and returns what Serve did.
func serve(t testing.TB, f *Forwarder) (addr string, stop func() error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Serve(ctx, ln) }()
	stop = sync.OnceValue(func() error { cancel(); return <-done })
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String(), stop
}

// fixed is a Keys func for keys that do not change.
func fixed(host ssh.Signer, ca ssh.PublicKey) func() (Keys, error) {
	return func() (Keys, error) { return Keys{HostKey: host, UserCAs: []ssh.PublicKey{ca}, Principal: "sbx"}, nil }
}

func (sb *sandbox) target() Target {
	return Target{SandboxID: "sb-1", ForwardAddr: sb.addr, User: sb.user,
		HostKey: string(ssh.MarshalAuthorizedKey(sb.host.PublicKey()))}
}

// startApp is a server on the loopback standing in for a sandbox's dev
// server: it answers each line with the line upper-cased, and on EOF
// writes "bye" and closes.
func startApp(t *testing.T, network, addr string) (port int, accepted func() int) {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		// The IPv6 case needs ::1, as the preview's IPv6 test does.
		t.Fatalf("listen %s: %v", addr, err)
	}
	var mu sync.Mutex
	n := 0
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			n++
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				b, _ := io.ReadAll(c)
				_, _ = c.Write(append(bytes.ToUpper(b), "bye"...))
			})
		}
	})
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().(*net.TCPAddr).Port, func() int { mu.Lock(); defer mu.Unlock(); return n }
}

func roundTrip(t *testing.T, c net.Conn, msg string) string {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestStream(t *testing.T) {
	sb := startSandbox(t)
	d := &Dialer{CA: sb.ca, KeyID: "edge-test"}
	for _, tc := range []struct{ network, addr string }{
		{"tcp4", "127.0.0.1:0"},
		{"tcp6", "[::1]:0"}, // "localhost" dev servers that picked IPv6
	} {
		t.Run(tc.network, func(t *testing.T) {
			port, _ := startApp(t, tc.network, tc.addr)
			c, err := d.Dial(t.Context(), sb.target(), port)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// Half a megabyte each way, half-closed: the stream is the
			// app's bytes and nothing else.
			msg := strings.Repeat("hello through the forwarder\n", 20000)
			if got, want := roundTrip(t, c, msg), strings.ToUpper(msg)+"bye"; got != want {
				t.Fatalf("got %d bytes, want %d", len(got), len(want))
			}
		})
	}
}

func TestRefusedPort(t *testing.T) {
	sb := startSandbox(t)
	port := closedport.New(t).N
	d := &Dialer{CA: sb.ca}
	_, err := d.Dial(t.Context(), sb.target(), port)
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("Dial to a closed port: %v, want ErrRefused", err)
	}
}

// TestEdgeChecksHostKey: a forwarder holding another key than the pinned
// one (a pod address that now belongs to another sandbox) opens nothing,
// and the edge learns it is not the pinned sandbox.
func TestEdgeChecksHostKey(t *testing.T) {
	sb := startSandbox(t)
	port, accepted := startApp(t, "tcp", "127.0.0.1:0")
	tg := sb.target()
	other := newKey(t)
	tg.HostKey = string(ssh.MarshalAuthorizedKey(other.PublicKey()))
	_, err := (&Dialer{CA: sb.ca}).Dial(t.Context(), tg, port)
	if !errors.Is(err, ErrHostKey) {
		t.Fatalf("Dial with another sandbox's host key pinned: %v, want ErrHostKey", err)
	}
	// The forwarder logs once its answer is out: wait for the line.
	if !waitfor.Try(t, 10*time.Second, func() bool { return strings.Contains(sb.logs.String(), "pinned another host key") }) {
		t.Fatalf("forwarder log does not say why:\n%s", sb.logs.String())
	}

	// An impostor: a forwarder that answers with another key than the
	// one the edge pinned and named.
	sb.keysMu.Lock()
	sb.keys.HostKey = other
	sb.keysMu.Unlock()
	_, err = (&Dialer{CA: sb.ca}).Dial(t.Context(), sb.target(), port)
	if !errors.Is(err, ErrHostKey) {
		t.Fatalf("Dial to a forwarder with another host key: %v, want ErrHostKey", err)
	}
	if n := accepted(); n != 0 {
		t.Fatalf("the app saw %d connections through forwarders that are not the pinned sandbox", n)
	}
}

// edgeHello is a hand-made hello, for the attacks.
type edgeHello struct {
	signer   ssh.Signer // signs; its PublicKey is sent as the certificate
	cert     []byte     // overrides the certificate sent
	port     int
	hostKey  ssh.PublicKey // the host key signed for
	namedKey ssh.PublicKey // the host key the hello names, if not hostKey
	domain   string
	nonce    []byte
	serverNS []byte // signs this server nonce instead of the one sent
}

// rawDial connects and sends h, returning the connection after the
// hello and the server nonce it was sent.
func rawDial(t *testing.T, addr string, h edgeHello) (net.Conn, []byte) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	greet := make([]byte, len(magic)+nonceSize)
	if _, err := io.ReadFull(c, greet); err != nil {
		t.Fatal(err)
	}
	ns := greet[len(magic):]
	if h.nonce == nil {
		h.nonce, _ = newNonce()
	}
	signNS := ns
	if h.serverNS != nil {
		signNS = h.serverNS
	}
	if h.domain == "" {
		h.domain = domainClient
	}
	tr := transcript{Domain: h.domain, ServerNonce: signNS, ClientNonce: h.nonce, Port: uint32(h.port), HostKey: h.hostKey.Marshal()}
	sig, err := sign(h.signer, tr.bytes())
	if err != nil {
		t.Fatal(err)
	}
	cert := h.cert
	if cert == nil {
		cert = h.signer.PublicKey().Marshal()
	}
	named := h.hostKey.Marshal()
	if h.namedKey != nil {
		named = h.namedKey.Marshal()
	}
	if err := writeFrame(c, &hello{Cert: cert, Port: uint32(h.port), Nonce: h.nonce, Sig: sig, HostKey: named}); err != nil {
		t.Fatal(err)
	}
	return c, ns
}

// refused asserts that the forwarder closed c without a reply.
func refused(t *testing.T, c net.Conn) {
	t.Helper()
	var r reply
	if err := readFrame(c, &r); err == nil {
		t.Fatalf("forwarder replied (status %d) to a hello it should refuse", r.Status)
	}
}

func userCert(t *testing.T, ca *sshca.CA, principal string, ttl time.Duration) ssh.Signer {
	t.Helper()
	s, err := ca.UserSigner(principal, "test", ttl)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// certSigner makes a certificate by hand, for the shapes sshca does not
// mint (host certificates, expired ones, critical options).
func certSigner(t *testing.T, ca ssh.Signer, mod func(*ssh.Certificate)) ssh.Signer {
	t.Helper()
	key := newKey(t)
	now := time.Now()
	c := &ssh.Certificate{Key: key.PublicKey(), CertType: ssh.UserCert, KeyId: "forged", ValidPrincipals: []string{"sbx"},
		ValidAfter: uint64(now.Add(-time.Minute).Unix()), ValidBefore: uint64(now.Add(time.Hour).Unix())}
	mod(c)
	if err := c.SignCert(rand.Reader, ca); err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewCertSigner(c, key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestForwarderRefuses: everyone but the edge, for this sandbox, now,
// gets the connection closed, no reply, and no connection to the app.
func TestForwarderRefuses(t *testing.T) {
	sb := startSandbox(t)
	port, accepted := startApp(t, "tcp", "127.0.0.1:0")
	caKey := newKey(t)
	sbCA := sshca.New(caKey)
	sb.keysMu.Lock()
	sb.keys.UserCAs = append(sb.keys.UserCAs, caKey.PublicKey()) // a second trusted CA, for hand-made certs
	sb.keysMu.Unlock()
	otherCA := newCA(t)
	plain := newKey(t)

	// A good hello, recorded to be replayed on a new connection.
	good := edgeHello{signer: userCert(t, sb.ca, "sbx", time.Hour), port: port, hostKey: sb.host.PublicKey()}

	cases := []struct {
		name string
		h    edgeHello
		log  string
	}{
		{"another CA", edgeHello{signer: userCert(t, otherCA, "sbx", time.Hour), port: port, hostKey: sb.host.PublicKey()}, "unknown authority"},
		{"a plain key", edgeHello{signer: plain, port: port, hostKey: sb.host.PublicKey()}, "not a certificate"},
		{"another principal (another sandbox's login)", edgeHello{signer: userCert(t, sbCA, "other", time.Hour), port: port, hostKey: sb.host.PublicKey()}, "principal"},
		{"expired", edgeHello{signer: certSigner(t, caKey, func(c *ssh.Certificate) {
			c.ValidAfter, c.ValidBefore = uint64(time.Now().Add(-2*time.Hour).Unix()), uint64(time.Now().Add(-time.Hour).Unix())
		}), port: port, hostKey: sb.host.PublicKey()}, "expired"},
		{"a host certificate", edgeHello{signer: certSigner(t, caKey, func(c *ssh.Certificate) { c.CertType = ssh.HostCert }), port: port, hostKey: sb.host.PublicKey()}, "not a user certificate"},
		{"critical options", edgeHello{signer: certSigner(t, caKey, func(c *ssh.Certificate) {
			c.CriticalOptions = map[string]string{"force-command": "true"}
		}), port: port, hostKey: sb.host.PublicKey()}, "critical option"},
		{"signed for another host key than it names", edgeHello{signer: good.signer, port: port, hostKey: newKey(t).PublicKey(), namedKey: sb.host.PublicKey()}, "bad signature"},
		{"signed for another nonce (a replay)", edgeHello{signer: good.signer, port: port, hostKey: sb.host.PublicKey(), serverNS: bytes.Repeat([]byte{7}, nonceSize)}, "bad signature"},
		{"the forwarder's domain", edgeHello{signer: good.signer, port: port, hostKey: sb.host.PublicKey(), domain: domainServer}, "bad signature"},
		{"a certificate of one key, signed by another", edgeHello{signer: plain, cert: good.signer.PublicKey().Marshal(), port: port, hostKey: sb.host.PublicKey()}, "bad signature"},
		{"port 0", edgeHello{signer: good.signer, port: 0, hostKey: sb.host.PublicKey()}, "port 0"},
		{"short nonce", edgeHello{signer: good.signer, port: port, hostKey: sb.host.PublicKey(), nonce: []byte{1, 2, 3}}, "nonce of 3 bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := rawDial(t, sb.addr, tc.h)
			refused(t, c)
			if !strings.Contains(sb.logs.String(), tc.log) {
				t.Errorf("forwarder log lacks %q:\n%s", tc.log, sb.logs.String())
			}
		})
	}
	if n := accepted(); n != 0 {
		t.Errorf("the app saw %d connections from refused hellos", n)
	}

	// The good hello works once: its bytes, replayed on a new
	// connection, do not.
	t.Run("replayed hello", func(t *testing.T) {
		c, ns := rawDial(t, sb.addr, good)
		var r reply
		if err := readFrame(c, &r); err != nil || r.Status != statusOpen {
			t.Fatalf("good hello: status %d, %v", r.Status, err)
		}
		c.Close()
		good.serverNS = ns // sign the old connection's nonce, as a recording would
		c2, _ := rawDial(t, sb.addr, good)
		refused(t, c2)
	})
}

func TestForwarderRefusesGarbage(t *testing.T) {
	sb := startSandbox(t)
	for _, tc := range []struct {
		name string
		send []byte
	}{
		{"an HTTP request", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")},
		{"an oversized frame", []byte{0x7f, 0xff, 0xff, 0xff}},
		{"an empty frame", []byte{0, 0, 0, 0}},
		{"a frame that is not a hello", append([]byte{0, 0, 0, 3}, 1, 2, 3)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", sb.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.ReadFull(c, make([]byte, len(magic)+nonceSize)); err != nil {
				t.Fatal(err)
			}
			_, _ = c.Write(tc.send)
			// Closing with our bytes unread resets the connection.
			if b, err := io.ReadAll(c); (err != nil && !errors.Is(err, syscall.ECONNRESET)) || len(b) != 0 {
				t.Fatalf("got %q, %v; want the connection closed with nothing said", b, err)
			}
		})
	}
}

// TestSlowHello: a caller that connects and says nothing is cut off at
// the handshake timeout.
func TestSlowHello(t *testing.T) {
	f := &Forwarder{Keys: fixed(newKey(t), newKey(t).PublicKey()), HandshakeTimeout: 100 * time.Millisecond}
	addr, _ := serve(t, f)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read: %v (want the forwarder to close before our 10 s deadline)", err)
	}
	if len(b) != len(magic)+nonceSize {
		t.Fatalf("got %d bytes before close, want the greeting only", len(b))
	}
}

// TestServeEndsStreams: ending Serve's context closes open streams and
// Serve returns only after they are done (goleak checks the rest).
func TestServeEndsStreams(t *testing.T) {
	ca, host := newCA(t), newKey(t)
	f := &Forwarder{Keys: fixed(host, ca.PublicKey())}
	addr, stop := serve(t, f)

	// An app that holds its connections open until the test ends.
	app, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	held := make(chan net.Conn, 1)
	go func() {
		c, err := app.Accept()
		if err == nil {
			held <- c
		}
	}()
	tg := Target{ForwardAddr: addr, User: "sbx", HostKey: string(ssh.MarshalAuthorizedKey(host.PublicKey()))}
	c, err := (&Dialer{CA: ca}).Dial(t.Context(), tg, app.Addr().(*net.TCPAddr).Port)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	appConn := <-held
	defer appConn.Close()

	if err := stop(); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("edge side still open after Serve ended: %v", err)
	}
	_ = appConn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := appConn.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("app side: %v, want EOF", err)
	}
}

// TestDialerReusesCertificates: one certificate per principal for half
// its life, not one per connection.
func TestDialerReusesCertificates(t *testing.T) {
	ca := &countingCA{CA: newCA(t)}
	d := &Dialer{CA: ca}
	for i := range 3 {
		if _, err := d.signer("sbx"); err != nil {
			t.Fatal(err)
		}
		if _, err := d.signer("other" + strconv.Itoa(i%2)); err != nil {
			t.Fatal(err)
		}
	}
	if ca.n != 3 {
		t.Fatalf("minted %d certificates, want 3 (one per principal)", ca.n)
	}
}

type countingCA struct {
	*sshca.CA
	n int
}

func (c *countingCA) UserSigner(p, id string, ttl time.Duration) (ssh.Signer, error) {
	c.n++
	return c.CA.UserSigner(p, id, ttl)
}

// TestHandshakeBound: connections that say nothing take up handshake
// slots only up to MaxHandshakes; without a queue the next is closed at
// once, and the edge gets through again once a slot frees.
func TestHandshakeBound(t *testing.T) {
	ca, host := newCA(t), newKey(t)
	f := &Forwarder{Keys: fixed(host, ca.PublicKey()), MaxHandshakes: 2, HandshakeQueue: -1}
	addr, _ := serve(t, f)

	var silent []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// The greeting means the forwarder took the connection.
		if _, err := io.ReadFull(c, make([]byte, len(magic)+nonceSize)); err != nil {
			t.Fatal(err)
		}
		silent = append(silent, c)
	}
	third, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	_ = third.SetReadDeadline(time.Now().Add(10 * time.Second))
	if b, err := io.ReadAll(third); len(b) != 0 || (err != nil && !errors.Is(err, syscall.ECONNRESET)) {
		t.Fatalf("third connection over the bound: got %q, %v; want it closed unanswered", b, err)
	}
	silent[0].Close()
	port, _ := startApp(t, "tcp", "127.0.0.1:0")
	tg := Target{ForwardAddr: addr, User: "sbx", HostKey: string(ssh.MarshalAuthorizedKey(host.PublicKey()))}
	d := &Dialer{CA: ca}
	// The slot frees when the forwarder sees the close: retry briefly.
	if !waitfor.Try(t, 10*time.Second, func() bool {
		var c net.Conn
		if c, err = d.Dial(t.Context(), tg, port); err == nil {
			c.Close()
		}
		return err == nil
	}) {
		t.Fatalf("edge still refused after a slot freed: %v", err)
	}
}

// TestRSAKeys: an RSA host key and an RSA user certificate sign with
// SHA-512, which the other side accepts (it refuses SHA-1 "ssh-rsa").
func TestRSAKeys(t *testing.T) {
	rsaKey := func() ssh.Signer {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		s, err := ssh.NewSignerFromKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	caKey, host := newKey(t), rsaKey()
	user := certSigner(t, caKey, func(c *ssh.Certificate) {})
	// certSigner certifies an ed25519 key; make one for an RSA key.
	userKey := rsaKey()
	cert := &ssh.Certificate{Key: userKey.PublicKey(), CertType: ssh.UserCert, KeyId: "rsa", ValidPrincipals: []string{"sbx"},
		ValidAfter: uint64(time.Now().Add(-time.Minute).Unix()), ValidBefore: uint64(time.Now().Add(time.Hour).Unix())}
	if err := cert.SignCert(rand.Reader, caKey); err != nil {
		t.Fatal(err)
	}
	rsaUser, err := ssh.NewCertSigner(cert, userKey)
	if err != nil {
		t.Fatal(err)
	}
	f := &Forwarder{Keys: fixed(host, caKey.PublicKey())}
	addr, _ := serve(t, f)
	port, _ := startApp(t, "tcp", "127.0.0.1:0")
	for _, s := range []ssh.Signer{user, rsaUser} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if err := handshake(c, s, host.PublicKey(), port); err != nil {
			t.Errorf("%s certificate, RSA host key: %v", s.PublicKey().(*ssh.Certificate).Key.Type(), err)
		}
		c.Close()
	}
}
