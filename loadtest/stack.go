package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/sbxedge/sbx/control"
	"github.com/sbxedge/sbx/control/apiclient"
	"github.com/sbxedge/sbx/control/devseed"
	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/standalone"
	"github.com/sbxedge/sbx/edge"
	"github.com/sbxedge/sbx/edge/preview"
	"github.com/sbxedge/sbx/internal/edgeapi"
)

// devStack is the real stack as sbx dev runs it: control (SQLite, local
// provider) and the edge in this process, the edge asking control over
// the loopback internal API and control handing its invalidations to the
// edge directly.
type devStack struct {
	svc         *control.Service
	edge        *edge.Edge
	api         *apiclient.ClientWithResponses
	token       string
	previewAddr string
	stop        []func()
}

// startDevStack starts a devStack keeping its data in dir; close stops it.
func startDevStack(ctx context.Context, dir string) (*devStack, error) {
	s := &devStack{}
	if err := s.start(ctx, dir); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *devStack) start(ctx context.Context, dir string) error {
	previewLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	sshLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		previewLn.Close()
		return err
	}
	previewPort := previewLn.Addr().(*net.TCPAddr).Port
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	var running atomic.Pointer[edge.Edge] // set once the edge serves
	svc, err := control.Open(ctx, standalone.Fill(control.Config{
		DataDir: dir, APIAddr: "127.0.0.1:0", SSHHost: "127.0.0.1", SSHPort: sshLn.Addr().(*net.TCPAddr).Port,
		InternalAddr: "127.0.0.1:0", InternalSecret: hex.EncodeToString(secret),
		PreviewDomain: "preview.localhost", PreviewScheme: "http", PreviewPort: previewPort,
		// In process, as sbx dev without Redis: control hands its
		// invalidations to the edge.
		PreviewChanged: func(ctx context.Context, inv edgeapi.Invalidation) error {
			if e := running.Load(); e != nil {
				e.Invalidate(ctx, inv)
			}
			return nil
		},
		Lifecycle: lifecycle.Config{DefaultProfile: devseed.DefaultProfile},
	}))
	if err != nil {
		previewLn.Close()
		sshLn.Close()
		return err
	}
	s.stop = append(s.stop, func() {
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer scancel()
		_ = svc.Shutdown(sctx)
	})
	s.svc = svc
	if s.token, _, err = devseed.Seed(ctx, svc.Store, "", filepath.Join(dir, "token")); err != nil {
		return err
	}
	if err := svc.Start(ctx); err != nil {
		return err
	}
	ecfg := edge.DefaultConfig()
	ecfg.SSHListener = sshLn
	ecfg.ControlURL, ecfg.InternalSecret = svc.InternalURL(), hex.EncodeToString(secret)
	ecfg.HostKeyDir = filepath.Join(dir, "broker-keys")
	ecfg.CA = svc.CA
	ecfg.Activity = svc.Activity
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	ecfg.Preview = edge.PreviewConfig{Listener: previewLn, PlainHTTP: true, Domain: "preview.localhost", PublicPort: previewPort,
		SessionKey: key, RouteTTL: ecfg.Preview.RouteTTL, DevSignIn: &preview.DevSignIn{AccountID: devseed.AccountID, User: "dev"}}
	ecfg.Logger, ecfg.Registry = slog.New(slog.DiscardHandler), svc.Registry
	e, err := edge.Open(ctx, ecfg)
	if err != nil {
		return err
	}
	if err := e.Start(ctx); err != nil {
		return err
	}
	running.Store(e)
	s.edge = e
	s.stop = append(s.stop, func() {
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer scancel()
		_ = e.Shutdown(sctx)
	})
	s.previewAddr = previewLn.Addr().String()
	s.api, err = apiclient.New(svc.URL(), s.token, nil)
	return err
}

// close stops the edge, then control.
func (s *devStack) close() {
	for i := len(s.stop) - 1; i >= 0; i-- {
		s.stop[i]()
	}
}
