package previewtls_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libdns/libdns"
	"github.com/miekg/dns"

	"github.com/sbxedge/sbx/edge/preview/previewtls"
	"github.com/sbxedge/sbx/edge/preview/previewtls/rfc2136"
)

// fakeZone is a DNS host in-process: a libdns provider whose records
// startDNS serves authoritatively for the zone domain.
type fakeZone struct {
	mu      sync.Mutex          // guards txt
	txt     map[string][]string // FQDN -> values
	appends atomic.Int32
	refused atomic.Int32 // updates refused for their signature
}

func (z *fakeZone) AppendRecords(_ context.Context, zone string, recs []libdns.Record) ([]libdns.Record, error) {
	z.mu.Lock()
	defer z.mu.Unlock()
	for _, r := range recs {
		rr := r.RR()
		if rr.Type != "TXT" {
			return nil, errors.New("fake zone holds TXT records only")
		}
		name := dns.Fqdn(libdns.AbsoluteName(rr.Name, zone))
		z.txt[name] = append(z.txt[name], rr.Data)
		z.appends.Add(1)
	}
	return recs, nil
}

func (z *fakeZone) DeleteRecords(_ context.Context, zone string, recs []libdns.Record) ([]libdns.Record, error) {
	z.mu.Lock()
	defer z.mu.Unlock()
	for _, r := range recs {
		rr := r.RR()
		name := dns.Fqdn(libdns.AbsoluteName(rr.Name, zone))
		z.txt[name] = slices.DeleteFunc(z.txt[name], func(v string) bool { return v == rr.Data })
		if len(z.txt[name]) == 0 {
			delete(z.txt, name)
		}
	}
	return recs, nil
}

func (z *fakeZone) records() int {
	z.mu.Lock()
	defer z.mu.Unlock()
	return len(z.txt)
}

// The TSIG key the test zone accepts dynamic updates with.
const (
	tsigKey    = "edge-acme."
	tsigSecret = "c2J4LWVkZ2UtdGVzdC10c2lnLXNlY3JldC0zMmJ5dGVzIQ=="
)

// update applies an RFC 2136 update signed with the zone's TSIG key (the
// server has verified the signature; TsigStatus says how that went) and
// signs the reply m. Unsigned or badly signed updates are refused.
func (z *fakeZone) update(w dns.ResponseWriter, q, m *dns.Msg) {
	t := q.IsTsig()
	if t == nil || w.TsigStatus() != nil || t.Hdr.Name != tsigKey || len(q.Question) != 1 || q.Question[0].Name != dns.Fqdn(domain) {
		m.Rcode = dns.RcodeRefused
		z.refused.Add(1)
		return
	}
	z.mu.Lock()
	for _, rr := range q.Ns {
		txt, ok := rr.(*dns.TXT)
		if !ok || len(txt.Txt) != 1 {
			continue
		}
		name := txt.Hdr.Name
		switch txt.Hdr.Class {
		case dns.ClassINET:
			z.txt[name] = append(z.txt[name], txt.Txt[0])
			z.appends.Add(1)
		case dns.ClassNONE: // delete this value (RFC 2136 2.5.4)
			z.txt[name] = slices.DeleteFunc(z.txt[name], func(v string) bool { return v == txt.Txt[0] })
			if len(z.txt[name]) == 0 {
				delete(z.txt, name)
			}
		}
	}
	z.mu.Unlock()
	m.SetTsig(tsigKey, t.Algorithm, 300, time.Now().Unix())
}

// answer adds the zone's SOA and TXT answers to m.
func (z *fakeZone) answer(m *dns.Msg) {
	z.mu.Lock()
	defer z.mu.Unlock()
	apex := dns.Fqdn(domain)
	for _, q := range m.Question {
		switch {
		case q.Qtype == dns.TypeSOA && q.Name == apex:
			m.Answer = append(m.Answer, &dns.SOA{Hdr: dns.RR_Header{Name: apex, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 1},
				Ns: "ns." + apex, Mbox: "ops." + apex, Serial: 1, Refresh: 60, Retry: 60, Expire: 600, Minttl: 1})
		case q.Qtype == dns.TypeTXT:
			for _, v := range z.txt[q.Name] {
				m.Answer = append(m.Answer, &dns.TXT{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: 1}, Txt: []string{v}})
			}
		}
	}
}

// TestWildcardOverDNS01: two replicas with a DNS provider and shared
// storage start at once; Pebble validates DNS-01 through the zone's
// server, the wildcard (and apex) certificate is ordered once, both replicas serve it for
// any preview host without asking the on-demand gate, and the challenge
// records are gone afterwards.
func TestWildcardOverDNS01(t *testing.T) {
	t.Run("libdns", func(t *testing.T) {
		zone := &fakeZone{txt: map[string][]string{}}
		testWildcard(t, zone, func(string) previewtls.DNSProvider { return zone })
	})
	// The edge's own provider: TSIG-signed RFC 2136 updates to the zone's
	// server, as cmd/edge configures it.
	t.Run("rfc2136", func(t *testing.T) {
		zone := &fakeZone{txt: map[string][]string{}}
		testWildcard(t, zone, func(addr string) previewtls.DNSProvider {
			return &rfc2136.Provider{Server: addr, KeyName: tsigKey, Secret: tsigSecret}
		})
		if zone.refused.Load() != 0 {
			t.Errorf("%d updates refused", zone.refused.Load())
		}
	})
}

func testWildcard(t *testing.T, zone *fakeZone, provider func(dnsAddr string) previewtls.DNSProvider) {
	dnsAddr := startDNS(t, zone)
	p := startPebble(t, 1, dnsAddr) // no HTTP-01 listener: DNS-01 only
	st := newStorage(t)
	mgrs := make([]*previewtls.Manager, 2)
	for i := range mgrs {
		m, err := previewtls.New(previewtls.Config{
			Domain: domain, Storage: st, CA: p.dir, Email: "ops@example.com", TrustedRoots: p.roots,
			DNS: provider(dnsAddr), DNSResolvers: []string{dnsAddr},
			Allow: func(context.Context, string) error {
				t.Error("the on-demand gate was asked in DNS-01 mode")
				return errors.New("no")
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		mgrs[i] = m
	}
	var wg sync.WaitGroup
	errs := make([]error, len(mgrs))
	for i, m := range mgrs {
		wg.Go(func() { errs[i] = m.Start(t.Context()) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("replica %d Start: %v", i, err)
		}
	}
	// certmagic keeps one certificate per name: the wildcard and the
	// apex (the login host) are an order each, whichever replica got
	// the lock.
	if n := p.finalized.Load(); n != 2 {
		t.Errorf("Pebble finalized %d orders, want 2 (wildcard and apex) for both replicas together", n)
	}
	if zone.appends.Load() == 0 || zone.records() != 0 {
		t.Errorf("challenge records: %d appended, %d left, want some appended and none left", zone.appends.Load(), zone.records())
	}
	for i, m := range mgrs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		tl := tls.NewListener(ln, m.TLSConfig())
		go func() {
			for {
				c, err := tl.Accept()
				if err != nil {
					return
				}
				_ = c.(*tls.Conn).Handshake()
				c.Close()
			}
		}()
		t.Cleanup(func() { ln.Close() })
		for _, host := range []string{"anylabel9x." + domain, "another2q." + domain, domain} {
			c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{ServerName: host, RootCAs: p.issuer})
			if err != nil {
				t.Errorf("replica %d handshake for %s: %v", i, host, err)
				continue
			}
			names := c.ConnectionState().PeerCertificates[0].DNSNames
			c.Close()
			want := "*." + domain
			if host == domain {
				want = domain
			}
			if !slices.Contains(names, want) {
				t.Errorf("replica %d served %s a certificate for %v, want one for %s", i, host, names, want)
			}
		}
	}
}

// TestRFC2136RefusedWithoutTheKey: an update signed with another secret
// fails with an error and changes nothing.
func TestRFC2136RefusedWithoutTheKey(t *testing.T) {
	zone := &fakeZone{txt: map[string][]string{}}
	addr := startDNS(t, zone)
	rec := []libdns.Record{libdns.TXT{Name: "_acme-challenge", Text: "token"}}
	bad := &rfc2136.Provider{Server: addr, KeyName: tsigKey, Secret: "d3Jvbmctc2VjcmV0LXdyb25nLXNlY3JldC13cm9uZyE="}
	if _, err := bad.AppendRecords(t.Context(), domain+".", rec); err == nil || zone.records() != 0 {
		t.Errorf("update with a wrong secret: err %v, %d records, want an error and none", err, zone.records())
	}
	good := &rfc2136.Provider{Server: addr, KeyName: tsigKey, Secret: tsigSecret}
	if _, err := good.AppendRecords(t.Context(), domain+".", rec); err != nil || zone.records() != 1 {
		t.Fatalf("update with the key: err %v, %d records, want one", err, zone.records())
	}
	if _, err := good.DeleteRecords(t.Context(), domain+".", rec); err != nil || zone.records() != 0 {
		t.Errorf("delete with the key: err %v, %d records, want none", err, zone.records())
	}
}
