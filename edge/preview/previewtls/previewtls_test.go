package previewtls_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/letsencrypt/pebble/v2/ca"
	"github.com/letsencrypt/pebble/v2/db"
	"github.com/letsencrypt/pebble/v2/va"
	"github.com/letsencrypt/pebble/v2/wfe"
	"github.com/miekg/dns"
	"github.com/redis/go-redis/v9"

	"github.com/sbxedge/sbx/edge/certstore"
	"github.com/sbxedge/sbx/edge/preview/previewtls"
)

const domain = "preview.localhost"

// startDNS answers every A query with 127.0.0.1, so Pebble's validator
// finds our HTTP listener for any preview host; with a zone, it is also
// that zone's authoritative server (SOA and TXT).
func startDNS(t *testing.T, zone ...*fakeZone) string {
	t.Helper()
	// Pebble's validator asks over TCP; serve both on one port.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	answer := dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		if q.Opcode == dns.OpcodeUpdate {
			if len(zone) == 0 {
				m.Rcode = dns.RcodeRefused
			} else {
				zone[0].update(w, q, m)
			}
			_ = w.WriteMsg(m)
			return
		}
		if len(zone) > 0 {
			zone[0].answer(m)
		}
		for _, qq := range q.Question {
			if qq.Qtype == dns.TypeA {
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: qq.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 1}, A: net.IPv4(127, 0, 0, 1)})
			}
		}
		_ = w.WriteMsg(m)
	})
	tsig := map[string]string{tsigKey: tsigSecret}
	// miekg/dns answers NOTIMP to anything but queries and notifies
	// unless told otherwise; the zone takes dynamic updates.
	accept := func(dh dns.Header) dns.MsgAcceptAction {
		if int(dh.Bits>>11)&0xF == dns.OpcodeUpdate {
			return dns.MsgAccept
		}
		return dns.DefaultMsgAcceptFunc(dh)
	}
	for _, srv := range []*dns.Server{{Listener: ln, Handler: answer, TsigSecret: tsig, MsgAcceptFunc: accept}, {PacketConn: pc, Handler: answer, TsigSecret: tsig, MsgAcceptFunc: accept}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go func() { _ = srv.ActivateAndServe() }()
		<-started
		t.Cleanup(func() { _ = srv.Shutdown() })
	}
	return ln.Addr().String()
}

// pebble is a real ACME server (Let's Encrypt's test CA) in-process. Its
// validator checks HTTP-01 at <name>:httpPort, resolved by dnsAddr.
type pebble struct {
	dir       string
	roots     *x509.CertPool // trusts the ACME API's TLS
	issuer    *x509.CertPool // trusts the certificates it issues
	finalized atomic.Int32
}

func startPebble(t *testing.T, httpPort int, dnsAddr string) *pebble {
	t.Helper()
	t.Setenv("PEBBLE_VA_NOSLEEP", "1")
	t.Setenv("PEBBLE_WFE_NONCEREJECT", "0")
	logger := log.New(io.Discard, "pebble ", 0)
	store := db.NewMemoryStore()
	authority := ca.New(logger, store, "", "ecdsa", 0, 1, map[string]ca.Profile{"default": {Description: "default"}})
	validator := va.New(logger, httpPort, 0, false, dnsAddr, store)
	front := wfe.New(logger, store, validator, authority, []string{"pebble.letsencrypt.org"}, false, false, 1, 1)
	p := &pebble{}
	api := front.Handler()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/finalize-order/") && r.Method == http.MethodPost {
			p.finalized.Add(1)
		}
		api.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p.dir = srv.URL + wfe.DirectoryPath
	p.roots = x509.NewCertPool()
	p.roots.AddCert(srv.Certificate())

	mgmt := httptest.NewTLSServer(front.ManagementHandler())
	defer mgmt.Close()
	resp, err := mgmt.Client().Get(mgmt.URL + wfe.RootCertPath + "0")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	pemBytes, _ := io.ReadAll(resp.Body)
	p.issuer = x509.NewCertPool()
	if !p.issuer.AppendCertsFromPEM(pemBytes) {
		block, _ := pem.Decode(pemBytes)
		t.Fatalf("pebble root does not parse: %v", block)
	}
	return p
}

// replica is one edge's TLS front: a TLS listener served from the manager
// and a plain HTTP listener that answers HTTP-01 challenges.
type replica struct {
	mgr     *previewtls.Manager
	tlsAddr string
}

func startReplica(t *testing.T, st *certstore.Redis, p *pebble, httpLn net.Listener, allow func(context.Context, string) error) *replica {
	t.Helper()
	httpPort := httpLn.Addr().(*net.TCPAddr).Port
	mgr, err := previewtls.New(previewtls.Config{
		Domain: domain, Storage: st, CA: p.dir, Email: "ops@example.com", TrustedRoots: p.roots,
		Allow: allow, HTTPPort: httpPort,
	})
	if err != nil {
		t.Fatal(err)
	}
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "app on "+r.Host) })
	hs := &http.Server{Handler: mgr.HTTPHandler(app), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(httpLn) }()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &http.Server{Handler: app, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = ts.Serve(tls.NewListener(ln, mgr.TLSConfig())) }()
	t.Cleanup(func() {
		_ = ts.Close()
		_ = hs.Close()
		mgr.Close()
	})
	return &replica{mgr: mgr, tlsAddr: ln.Addr().String()}
}

func newStorage(t *testing.T) *certstore.Redis {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	if err := rdb.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("Redis at 127.0.0.1:6379 is required: %v", err)
	}
	prefix := "sbxtest:previewtls:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	st := certstore.New(rdb, prefix)
	t.Cleanup(func() {
		st.Close()
		keys, _ := rdb.Keys(context.Background(), prefix+"*").Result()
		if len(keys) > 0 {
			rdb.Del(context.Background(), keys...)
		}
		rdb.Close()
	})
	return st
}

// TestTwoReplicasIssueOnce: two edge replicas sharing Redis storage get
// simultaneous TLS handshakes for a new preview host; Pebble issues one
// certificate, both serve it, and a host the gate refuses gets none.
func TestTwoReplicasIssueOnce(t *testing.T) {
	dnsAddr := startDNS(t)
	// Pebble validates HTTP-01 on one port, replica A's; replica B's
	// challenges are in the shared storage, which A's handler serves.
	httpA, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	httpB, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := startPebble(t, httpA.Addr().(*net.TCPAddr).Port, dnsAddr)
	live := "k7q2xw9m4t8r1p6z." + domain
	var gateCalls atomic.Int32
	allow := func(_ context.Context, name string) error {
		gateCalls.Add(1)
		if name != live {
			return errors.New("not a live preview host")
		}
		return nil
	}
	st := newStorage(t)
	reps := []*replica{startReplica(t, st, p, httpA, allow), startReplica(t, st, p, httpB, allow)}

	var wg sync.WaitGroup
	serials := make([]string, 4)
	errs := make([]error, 4)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := &net.Dialer{Timeout: 60 * time.Second}
			c, err := tls.DialWithDialer(d, "tcp", reps[i%2].tlsAddr, &tls.Config{ServerName: live, RootCAs: p.issuer})
			if err != nil {
				errs[i] = err
				return
			}
			defer c.Close()
			serials[i] = c.ConnectionState().PeerCertificates[0].SerialNumber.String()
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("handshake %d with replica %d: %v", i, i%2, err)
		}
	}
	if n := p.finalized.Load(); n != 1 {
		t.Errorf("Pebble finalized %d orders, want 1", n)
	}
	for i, s := range serials {
		if s != serials[0] {
			t.Errorf("handshake %d got certificate %s, handshake 0 got %s: replicas serve different certificates", i, s, serials[0])
		}
	}
	// HTTPS through the issued certificate, HTTP/2 by ALPN.
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.issuer}, ForceAttemptHTTP2: true,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, reps[1].tlsAddr)
		}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("https://" + live + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || string(body) != "app on "+live {
		t.Errorf("HTTPS: %s %q, want HTTP/2 and the app", resp.Proto, body)
	}

	// A name the gate refuses gets no certificate and no order.
	_, err = tls.Dial("tcp", reps[0].tlsAddr, &tls.Config{ServerName: "random." + domain, RootCAs: p.issuer})
	if err == nil {
		t.Error("handshake for a refused host succeeded")
	}
	if n := p.finalized.Load(); n != 1 {
		t.Errorf("after a refused host Pebble finalized %d orders, want still 1", n)
	}
}
