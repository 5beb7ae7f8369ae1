package edge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"time"

	"github.com/sbxedge/sbx/edge/egress"
	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/egresspolicy"
	"github.com/sbxedge/sbx/internal/httplimit"
)

// EgressConfig configures the egress gateway, the forward proxy
// sandboxes reach the outside through. Empty Addr and nil Listener turn
// it off.
type EgressConfig struct {
	// Addr is where the gateway listens; Listener, when set, is used
	// instead.
	Addr     string
	Listener net.Listener
	// Trust are ranges the operator opens for known upstreams
	// (--egress-trust); they never open the product's own listeners.
	Trust []netip.Prefix
	// Cluster are the cluster's pod and service ranges, refused like
	// RFC 1918 (--egress-cluster-range).
	Cluster []netip.Prefix
	// Own are the product's listeners beyond the edge's (control's API,
	// internal API and metrics, Redis, Postgres); the edge adds its own
	// listeners, control's internal API and Redis when their URLs name
	// an address.
	Own []netip.AddrPort
	// PolicyTTL is how long control's answer about a credential is kept
	// (default 2 s): the longest a new connection follows an old policy.
	PolicyTTL time.Duration
	// BodyTimeout bounds a proxied request's body like the API's and the
	// previews' (httplimit.BodyDeadline; 0: its default): a request with
	// no proxy credential whose body never arrives is refused at once and
	// closed, never held.
	BodyTimeout time.Duration
}

func (c EgressConfig) enabled() bool { return c.Addr != "" || c.Listener != nil }

func (c EgressConfig) validate() error {
	if !c.enabled() {
		return nil
	}
	_, err := egresspolicy.NewRanges(egresspolicy.RangesConfig{Cluster: c.Cluster, Trust: c.Trust, Own: c.Own})
	if err != nil {
		return fmt.Errorf("edge: egress: %w", err)
	}
	return nil
}

// egressServer is the running gateway and its listener.
type egressServer struct {
	gw   *egress.Gateway
	log  *egress.MemoryLog
	ship *egress.Shipper // the decisions, to control
	srv  *http.Server
	ln   net.Listener
}

// openEgress binds the gateway's listener and builds it; the refused
// listeners include every one this edge has bound so far.
func (e *Edge) openEgress() (*egressServer, error) {
	c := e.cfg.Egress
	ln, err := e.listen(c.Listener, c.Addr, "egress gateway", DefaultEgressMaxConns)
	if err != nil {
		return nil, err
	}
	own := append([]netip.AddrPort(nil), c.Own...)
	for _, a := range []net.Addr{e.sshLn.Addr(), ln.Addr(), e.PreviewAddr(), e.HTTPAddr()} {
		if ap, ok := addrPort(a); ok {
			own = append(own, ap)
		}
	}
	for _, s := range []string{e.cfg.MetricsAddr, urlHost(e.cfg.ControlURL), urlHost(e.cfg.RedisURL)} {
		if ap, err := netip.ParseAddrPort(s); err == nil && ap.Port() != 0 {
			own = append(own, ap)
		}
	}
	ranges, err := egresspolicy.NewRanges(egresspolicy.RangesConfig{Cluster: c.Cluster, Trust: c.Trust, Own: own})
	if err != nil {
		ln.Close()
		return nil, err
	}
	logger := e.log.With("component", "egress")
	es := &egressServer{log: &egress.MemoryLog{}, ln: ln,
		ship: egress.NewShipper(e.cc.SendEgressLog, edgeapi.MaxEgressBatch, 0, logger)}
	es.gw, err = egress.New(egress.Config{
		Sandboxes:   egress.NewCache(e.cc, c.PolicyTTL, nil),
		Credentials: e.cc,
		Ranges:      ranges, Log: egress.Tee{es.log, es.ship}, Metrics: e.reg, Logger: logger,
	})
	if err != nil {
		ln.Close()
		return nil, err
	}
	es.srv = &http.Server{
		Handler: httplimit.BodyDeadline{Timeout: c.BodyTimeout}.Wrap(es.gw),
		// A proxy request is a line and a few headers; a client slower
		// than this is holding a connection, not sending. No read or
		// write timeout: tunnels live as long as their transfers.
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    32 << 10,
		ErrorLog:          slog.NewLogLogger(e.log.Handler(), slog.LevelDebug),
	}
	// A sandbox that changed (ended, suspended, policy edited) has its
	// open tunnels checked again, bounded so a slow control does not
	// hold up the invalidations after it.
	e.inv = append(e.inv, func(ctx context.Context, inv edgeapi.Invalidation) {
		if inv.Kind != edgeapi.InvalidateSandbox || inv.SandboxID == "" {
			return
		}
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		es.gw.Recheck(ctx, inv.SandboxID)
	})
	return es, nil
}

// server is the gateway as one of the edge's servers: shutdown lets open
// tunnels finish within the drain, close cuts them.
func (es *egressServer) server() *server {
	return &server{
		name: "egress gateway", ln: es.ln, closed: http.ErrServerClosed,
		serve: func(ln net.Listener) error {
			es.ship.Start()
			return es.srv.Serve(ln)
		},
		shutdown: func(ctx context.Context) error {
			err := errors.Join(es.srv.Shutdown(ctx), es.gw.Shutdown(ctx))
			es.ship.Stop(ctx)
			return err
		},
		close: func() error {
			err := es.srv.Close()
			es.gw.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			es.ship.Stop(ctx)
			return err
		},
	}
}

// EgressAddr is where the egress gateway listens, nil when it is off.
func (e *Edge) EgressAddr() net.Addr {
	if e.egress == nil {
		return nil
	}
	return e.egress.ln.Addr()
}

// EgressLog is the gateway's decisions on this replica, nil when it is
// off.
func (e *Edge) EgressLog() *egress.MemoryLog {
	if e.egress == nil {
		return nil
	}
	return e.egress.log
}

func addrPort(a net.Addr) (netip.AddrPort, bool) {
	if a == nil {
		return netip.AddrPort{}, false
	}
	ap, err := netip.ParseAddrPort(a.String())
	return ap, err == nil
}

// urlHost is a URL's host:port, "" when it has none.
func urlHost(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return ""
	}
	return u.Host
}
