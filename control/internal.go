package control

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/sbxedge/sbx/control/internalapi"
	"github.com/sbxedge/sbx/control/previewroute"
	"github.com/sbxedge/sbx/control/sshauth"
	"github.com/sbxedge/sbx/internal/httplimit"
)

// internalServer is the /internal/v1 listener the edge talks to. It is
// separate from the public API so that it can be bound to a private
// address and never routed from the internet.
type internalServer struct {
	srv  *http.Server
	ln   net.Listener
	done chan error // Serve's result; buffered so Serve never blocks on exit
}

// startInternal listens on cfg.InternalAddr, if set.
func (s *Service) startInternal(ctx context.Context) error {
	if s.cfg.InternalAddr == "" {
		return nil
	}
	var members *previewroute.MembersFile
	if s.cfg.PreviewMembersFile != "" {
		var err error
		if members, err = previewroute.OpenMembersFile(s.cfg.PreviewMembersFile); err != nil {
			return err
		}
		s.watchMembers(ctx, members)
	}
	api, err := internalapi.New(internalapi.Config{Secret: s.cfg.InternalSecret, Logger: s.log, Registry: s.Registry},
		internalapi.Deps{SSHAuth: sshauth.New(s.Store, nil, s.log), Preview: previewroute.New(s.Store, nil), PreviewMembers: members,
			Waker: s, Egress: s.Life, Connections: s.Conns, Shares: s.Life,
			EgressLog: s.Life, Credentials: s.Life})
	if err != nil {
		return err
	}
	ln, err := s.listen(s.cfg.InternalAddr, "internal API", cmp.Or(s.cfg.InternalMaxConns, DefaultInternalMaxConns))
	if err != nil {
		return err
	}
	s.reserveOwn(ln.Addr(), "internal API")
	is := &internalServer{ln: ln, done: make(chan error, 1), srv: &http.Server{
		// The body deadline holds before the secret is checked.
		Handler: httplimit.BodyDeadline{Timeout: s.cfg.BodyTimeout}.Wrap(api.Handler()),
		// The edge keeps connections alive and sends small requests; a
		// caller slow with its headers is broken, not busy.
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}}
	go func() { is.done <- is.srv.Serve(ln) }()
	s.internal = is
	return nil
}

// InternalURL is the internal API's base URL, or "" when it is not served.
func (s *Service) InternalURL() string {
	if s.internal == nil {
		return ""
	}
	return "http://" + s.internal.ln.Addr().String()
}

func (is *internalServer) shutdown(ctx context.Context) error {
	var errs []error
	if err := is.srv.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("shutdown internal API: %w", err))
		_ = is.srv.Close()
	}
	if err := <-is.done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
