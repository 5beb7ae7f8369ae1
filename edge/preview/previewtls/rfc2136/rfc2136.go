// Package rfc2136 is a libdns provider that writes DNS-01 challenge
// records with RFC 2136 dynamic updates signed with TSIG (RFC 8945). Every
// authoritative server worth running (BIND, Knot, PowerDNS, and the
// managed DNS services that front them) accepts these, so the edge needs
// no per-vendor API client to get a wildcard certificate.
package rfc2136

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/libdns/libdns"
	"github.com/miekg/dns"
)

// Provider sends updates to one primary server.
type Provider struct {
	// Server is the primary's "host:port".
	Server string
	// KeyName, KeyAlgorithm (default hmac-sha256) and Secret (base64)
	// are the TSIG key the server allows to update the zone.
	KeyName, KeyAlgorithm, Secret string
}

// Validate checks the configuration without contacting the server.
func (p *Provider) Validate() error {
	if p.Server == "" || p.KeyName == "" || p.Secret == "" {
		return errors.New("rfc2136: server, TSIG key name and secret are required")
	}
	switch p.KeyAlgorithm {
	case "", "hmac-sha256", "hmac-sha384", "hmac-sha512":
		return nil
	}
	return fmt.Errorf("rfc2136: TSIG algorithm %q: want hmac-sha256, hmac-sha384 or hmac-sha512", p.KeyAlgorithm)
}

// AppendRecords adds TXT records to zone.
func (p *Provider) AppendRecords(ctx context.Context, zone string, recs []libdns.Record) ([]libdns.Record, error) {
	return recs, p.update(ctx, zone, recs, (*dns.Msg).Insert)
}

// DeleteRecords removes exactly these TXT records (name and value) from
// zone; other values at the same name stay.
func (p *Provider) DeleteRecords(ctx context.Context, zone string, recs []libdns.Record) ([]libdns.Record, error) {
	return recs, p.update(ctx, zone, recs, (*dns.Msg).Remove)
}

// update sends one update of zone: op (insert or remove) on recs.
func (p *Provider) update(ctx context.Context, zone string, recs []libdns.Record, op func(*dns.Msg, []dns.RR)) error {
	rrs, err := txtRRs(zone, recs)
	if err != nil {
		return err
	}
	m := new(dns.Msg)
	m.SetUpdate(dns.Fqdn(zone))
	op(m, rrs)
	return p.send(ctx, m)
}

// txtRRs converts libdns records to TXT RRs; DNS-01 needs nothing else.
func txtRRs(zone string, recs []libdns.Record) ([]dns.RR, error) {
	rrs := make([]dns.RR, 0, len(recs))
	for _, r := range recs {
		rr := r.RR()
		if rr.Type != "TXT" {
			return nil, fmt.Errorf("rfc2136: record type %s: only TXT is supported", rr.Type)
		}
		ttl := uint32(rr.TTL / time.Second)
		rrs = append(rrs, &dns.TXT{
			Hdr: dns.RR_Header{Name: dns.Fqdn(libdns.AbsoluteName(rr.Name, zone)), Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: ttl},
			Txt: []string{rr.Data},
		})
	}
	return rrs, nil
}

func (p *Provider) send(ctx context.Context, m *dns.Msg) error {
	alg := dns.HmacSHA256
	if p.KeyAlgorithm != "" {
		alg = dns.Fqdn(p.KeyAlgorithm)
	}
	key := dns.Fqdn(p.KeyName)
	m.SetTsig(key, alg, 300, time.Now().Unix())
	// TCP: an update must not be lost or replayed by a UDP retry.
	c := &dns.Client{Net: "tcp", TsigSecret: map[string]string{key: p.Secret}, Timeout: 30 * time.Second}
	r, _, err := c.ExchangeContext(ctx, m, p.Server)
	if err != nil {
		return fmt.Errorf("rfc2136: update %s at %s: %w", m.Question[0].Name, p.Server, err)
	}
	if r.Rcode != dns.RcodeSuccess {
		return fmt.Errorf("rfc2136: update %s at %s: %s", m.Question[0].Name, p.Server, dns.RcodeToString[r.Rcode])
	}
	return nil
}
