package sandboxinit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/sbxedge/sbx/internal/netlimit"
)

// maxRequest bounds a request line: a sync of many services with their
// environments fits in far less.
const maxRequest = 1 << 20

// Serve answers one control call read from rw and returns when it is
// answered (for a followed log: when ctx ends, the service goes, or the
// peer stops reading or closes its side; a followed log closes rw when
// rw is an io.Closer).
func (s *Supervisor) Serve(ctx context.Context, rw io.ReadWriter) error {
	br := bufio.NewReader(io.LimitReader(rw, maxRequest))
	line, err := br.ReadBytes('\n')
	if err != nil && !(errors.Is(err, io.EOF) && len(line) > 0) {
		return fmt.Errorf("read control request: %w", err)
	}
	var req Request
	enc := json.NewEncoder(rw)
	if err := json.Unmarshal(line, &req); err != nil {
		return enc.Encode(Response{Error: "malformed request: " + err.Error()})
	}
	var resp Response
	switch req.Op {
	case "sync":
		err = s.Sync(req.Services)
	case "put":
		if req.Service == nil {
			err = errors.New("put: service is required")
		} else {
			err = s.Put(*req.Service)
		}
	case "delete":
		err = s.Delete(req.Name)
	case "list":
	case "busy":
		if s.cfg.Procs == nil {
			return enc.Encode(Response{Error: "busy: this init does not report work"})
		}
		b, err := s.cfg.Procs.Sample(ctx, peerOf(ctx))
		if err != nil {
			return enc.Encode(Response{Error: "busy: " + err.Error()})
		}
		return enc.Encode(Response{Busy: &b})
	case "logs":
		if req.Follow {
			var stop func()
			ctx, stop = untilPeerGone(ctx, br, rw)
			defer stop()
		}
		return s.serveLogs(ctx, enc, req)
	default:
		err = fmt.Errorf("unknown op %q", req.Op)
	}
	if err != nil {
		resp.Error, resp.Unknown = err.Error(), errors.Is(err, ErrUnknownService)
	} else {
		resp.Services = s.List()
	}
	return enc.Encode(resp)
}

// untilPeerGone returns ctx, cancelled as well when a read from r ends:
// a followed log's caller has nothing more to send, so its side closing
// is how it leaves. Through sshd that is the only sign (sshd closes the
// relay's stdin when the client closes the channel); in process the
// session's context says it too. stop closes rw when it can be closed,
// which ends the read, and waits for it.
func untilPeerGone(ctx context.Context, r io.Reader, rw io.ReadWriter) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer cancel()
		_, _ = io.Copy(io.Discard, r)
	}()
	return ctx, func() {
		cancel()
		if c, ok := rw.(io.Closer); ok {
			_ = c.Close()
			<-done
		}
	}
}

// ServeListener answers control calls on ln (the init's unix socket, to
// which sshd's subsystem command relays each call) until ctx ends or ln
// fails (nil once ctx ends or ln is closed). It closes ln and returns
// once every call it started returned.
func (s *Supervisor) ServeListener(ctx context.Context, ln net.Listener) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var backoff netlimit.Backoff
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			if netlimit.Temporary(err) {
				// Out of descriptors: control calls come back with them.
				time.Sleep(backoff.Next())
				continue
			}
			return fmt.Errorf("accept a control call: %w", err)
		}
		backoff.Reset()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			// A followed log ends with ctx, not only when the peer goes.
			stop := context.AfterFunc(ctx, func() { c.Close() })
			defer stop()
			// The relay's PID: its process is this call's, not work.
			if err := s.Serve(withPeer(ctx, peerPID(c)), c); err != nil {
				s.cfg.Logger.Debug("init control call ended", "err", err)
			}
		}()
	}
}

func (s *Supervisor) serveLogs(ctx context.Context, enc *json.Encoder, req Request) error {
	tail := req.Tail
	if tail <= 0 {
		tail = 100
	}
	if !req.Follow {
		var lines []Line
		err := s.Logs(ctx, req.Name, tail, false, func(l Line) error { lines = append(lines, l); return nil })
		if err != nil {
			return enc.Encode(Response{Error: err.Error(), Unknown: errors.Is(err, ErrUnknownService)})
		}
		return enc.Encode(Response{Lines: lines})
	}
	s.mu.Lock()
	_, ok := s.services[req.Name]
	s.mu.Unlock()
	if !ok {
		return enc.Encode(Response{Error: fmt.Sprintf("%v %q", ErrUnknownService, req.Name), Unknown: true})
	}
	if err := enc.Encode(Response{}); err != nil {
		return err
	}
	return s.Logs(ctx, req.Name, tail, true, func(l Line) error { return enc.Encode(l) })
}
