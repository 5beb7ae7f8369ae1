package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	gliderssh "github.com/gliderlabs/ssh"
	"github.com/pkg/sftp"
	gossh "golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/internal/initproto"
	"github.com/sbxedge/sbx/internal/sandboxinit"
)

// handshakeTimeout bounds the unauthenticated phase of a connection, so a
// client that connects and stalls cannot hold a goroutine forever.
const handshakeTimeout = 10 * time.Second

type embeddedOptions struct {
	dir     string              // sandbox dir: workspace/ and home/ inside
	port    int                 // preferred; 0 or taken means any
	user    string              // the only login name accepted
	env     []string            // the spec's Env, in every session and service
	svcs    []initproto.Service // the spec's Services, started with the init
	hostKey gossh.Signer
	caKey   gossh.PublicKey
	logger  *slog.Logger
}

// embedded is a gliderlabs SSH server for one sandbox. Sessions run as the
// provider's OS user, each in its own process group so signals and kills
// reach its children.
//
// This is a development box: port forwarding is allowed, but only to and
// from loopback, so a sandbox cannot be used to reach the rest of the
// network the developer's machine sits on.
type embedded struct {
	opts      embeddedOptions
	workspace string
	home      string
	srv       *gliderssh.Server
	serveDone chan struct{}
	died      chan struct{} // closed if Serve returned before stop
	// init supervises the sandbox's services, as the init of a pod does;
	// its control protocol is the "sbx-init" subsystem. stop ends it.
	init *sandboxinit.Supervisor
	// booted says init started with every service of opts.svcs.
	booted bool

	mu     sync.Mutex // guards procs, closed
	procs  map[int]struct{}
	closed bool
	wg     sync.WaitGroup // session handlers
	// ptys holds each session's pty request (ptyState) from the request
	// callback until its handler takes it. Not the session's Context:
	// gliderlabs gives every session of a connection the connection's,
	// so a value set there reaches the connection's later sessions.
	ptys sync.Map // gliderssh.Session → ptyState
}

func startEmbedded(ctx context.Context, o embeddedOptions) (*embedded, int, error) {
	ln, err := listenLoopback(o.port)
	if err != nil {
		return nil, 0, err
	}
	e := &embedded{
		opts:      o,
		workspace: filepath.Join(o.dir, "workspace"),
		home:      filepath.Join(o.dir, "home"),
		serveDone: make(chan struct{}),
		died:      make(chan struct{}),
		procs:     map[int]struct{}{},
	}
	init, booted, err := newInit(o.dir, o.user, o.env, o.svcs, o.logger)
	if err != nil {
		ln.Close()
		return nil, 0, err
	}
	e.init, e.booted = init, booted
	fwd := &gliderssh.ForwardedTCPHandler{}
	checker := &gossh.CertChecker{
		IsUserAuthority: func(auth gossh.PublicKey) bool {
			return bytes.Equal(auth.Marshal(), o.caKey.Marshal())
		},
	}
	e.srv = &gliderssh.Server{
		HostSigners: []gliderssh.Signer{o.hostKey},
		Version:     "sbx-local",
		Handler:     e.handleSession,
		// Runs on the goroutine that handles the session's requests, before
		// the handler starts; see ptyState.
		SessionRequestCallback: func(s gliderssh.Session, kind string) bool {
			if req, winCh, ok := s.Pty(); ok && kind != "subsystem" {
				e.ptys.Store(s, ptyState{req: req, winCh: winCh})
			}
			return true
		},
		PublicKeyHandler: func(ctx gliderssh.Context, key gliderssh.PublicKey) bool {
			return e.authorize(ctx, checker, key)
		},
		ConnCallback: func(ctx gliderssh.Context, conn net.Conn) net.Conn {
			t := time.AfterFunc(handshakeTimeout, func() { conn.Close() })
			ctx.SetValue(handshakeTimerKey{}, t)
			return conn
		},
		LocalPortForwardingCallback: func(_ gliderssh.Context, host string, _ uint32) bool {
			return isLoopback(host)
		},
		ReversePortForwardingCallback: func(_ gliderssh.Context, host string, _ uint32) bool {
			// "" and "*" mean all interfaces: refused.
			return isLoopback(host)
		},
		ChannelHandlers: map[string]gliderssh.ChannelHandler{
			"session":      gliderssh.DefaultSessionHandler,
			"direct-tcpip": gliderssh.DirectTCPIPHandler,
		},
		RequestHandlers: map[string]gliderssh.RequestHandler{
			"tcpip-forward":        fwd.HandleSSHRequest,
			"cancel-tcpip-forward": fwd.HandleSSHRequest,
			"keepalive@openssh.com": func(gliderssh.Context, *gliderssh.Server, *gossh.Request) (bool, []byte) {
				return true, nil
			},
		},
		SubsystemHandlers: map[string]gliderssh.SubsystemHandler{"sftp": e.handleSFTP, initproto.Subsystem: e.handleInit},
	}
	go func() {
		defer close(e.serveDone)
		err := e.srv.Serve(ln)
		e.mu.Lock()
		closed := e.closed
		e.mu.Unlock()
		if !closed {
			o.logger.Error("embedded ssh server stopped", "err", err)
			close(e.died)
		}
	}()
	addr := ln.Addr().(*net.TCPAddr)
	if err := waitReady(ctx, addr.String(), o.hostKey.PublicKey(), e.died); err != nil {
		e.stop()
		return nil, 0, err
	}
	return e, addr.Port, nil
}

type handshakeTimerKey struct{}

// authorize accepts only user certificates from the CA naming the login
// user as principal and currently valid; plain keys are refused.
//
// CertChecker.CheckCert checks principal, validity, critical options and
// signature but NOT the authority (only Authenticate does), and treats an
// empty principal list as "anyone": both are checked here first.
func (e *embedded) authorize(ctx gliderssh.Context, checker *gossh.CertChecker, key gliderssh.PublicKey) bool {
	cert, ok := key.(*gossh.Certificate)
	if !ok || cert.CertType != gossh.UserCert || ctx.User() != e.opts.user {
		return false
	}
	if !checker.IsUserAuthority(cert.SignatureKey) || len(cert.ValidPrincipals) == 0 {
		e.opts.logger.Debug("certificate refused: unknown authority or no principals", "remote_addr", ctx.RemoteAddr().String(), "key_id", cert.KeyId)
		return false
	}
	if err := checker.CheckCert(ctx.User(), cert); err != nil {
		e.opts.logger.Debug("certificate refused", "remote_addr", ctx.RemoteAddr().String(), "key_id", cert.KeyId, "err", err)
		return false
	}
	if t, ok := ctx.Value(handshakeTimerKey{}).(*time.Timer); ok {
		t.Stop() // authenticated: lift the handshake deadline
	}
	return true
}

func (e *embedded) exited() <-chan struct{} { return e.died }

func (e *embedded) servicesStarted() bool { return e.booted }

// stop closes the listener and every connection, kills every session's
// process group, and waits for the handlers.
func (e *embedded) stop() {
	e.mu.Lock()
	e.closed = true
	for pgid := range e.procs {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	e.mu.Unlock()
	e.srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.srv.Shutdown(ctx); err != nil {
		e.opts.logger.Warn("embedded ssh server shutdown", "err", err)
	}
	<-e.serveDone
	e.wg.Wait()
	e.init.Close()
}

// enter registers a handler; false once stopping, so wg.Add never races
// with stop's Wait.
func (e *embedded) enter() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	e.wg.Add(1)
	return true
}

func (e *embedded) track(pgid int, add bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if add {
		e.procs[pgid] = struct{}{}
		if e.closed { // lost the race with stop
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	} else {
		delete(e.procs, pgid)
	}
}

func (e *embedded) env(s gliderssh.Session) []string {
	// Session env requests come next so they override the defaults; the
	// marker comes last, so no request can drop it (exec keeps the last of
	// duplicate keys).
	return append(append(baseEnv(e.opts.dir, e.opts.user, e.opts.env), s.Environ()...), marker(e.opts.dir))
}

// handleInit serves one call of the init's control protocol.
func (e *embedded) handleInit(s gliderssh.Session) {
	if !e.enter() {
		return
	}
	defer e.wg.Done()
	if err := e.init.Serve(s.Context(), s); err != nil {
		e.opts.logger.Debug("init control call ended", "err", err)
	}
	_ = s.Exit(0)
}

func (e *embedded) handleSFTP(s gliderssh.Session) {
	if !e.enter() {
		return
	}
	defer e.wg.Done()
	srv, err := sftp.NewServer(s, sftp.WithServerWorkingDirectory(e.workspace))
	if err != nil {
		e.opts.logger.Warn("start sftp server", "err", err)
		return
	}
	// Like OpenSSH's sftp-server, report how the subsystem ended with an
	// exit-status before the channel closes: modern scp (SFTP mode) treats
	// a missing exit-status as failure. srv.Close would close the channel
	// first and lose it, so Exit (which sends the status, then closes) is
	// the only close.
	code := 0
	if err := srv.Serve(); err != nil && !errors.Is(err, io.EOF) {
		e.opts.logger.Debug("sftp session ended", "err", err)
		code = 1
	}
	_ = s.Exit(code)
}

func (e *embedded) handleSession(s gliderssh.Session) {
	if !e.enter() {
		return
	}
	defer e.wg.Done()
	var cmd *exec.Cmd
	if raw := s.RawCommand(); raw != "" {
		cmd = exec.Command("/bin/sh", "-c", raw)
	} else {
		cmd = exec.Command(loginShell(), "-l")
	}
	cmd.Dir = e.workspace
	cmd.Env = e.env(s)
	if gliderssh.AgentRequested(s) {
		// Like sshd, a session whose client forwards its agent (ssh -A)
		// gets SSH_AUTH_SOCK; git and ssh in the sandbox then sign with
		// the developer's keys without holding them.
		if conn, ok := s.Context().Value(gliderssh.ContextKeyConn).(gossh.Conn); ok {
			a, err := listenAgent(conn)
			if err != nil {
				e.opts.logger.Warn("agent forwarding", "err", err)
			} else {
				defer func() {
					if err := a.close(); err != nil {
						e.opts.logger.Debug("close agent socket", "err", err)
					}
				}()
				cmd.Env = append(cmd.Env, "SSH_AUTH_SOCK="+a.path)
			}
		}
	}
	if v, ok := e.ptys.LoadAndDelete(s); ok {
		pty := v.(ptyState)
		cmd.Env = append(cmd.Env, "TERM="+pty.req.Term)
		e.runPty(s, cmd, pty.req, pty.winCh)
		return
	}
	e.runPipes(s, cmd)
}

func loginShell() string {
	if _, err := os.Stat("/bin/bash"); err == nil {
		return "/bin/bash"
	}
	return "/bin/sh"
}

func (e *embedded) runPipes(s gliderssh.Session, cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// An *os.File stdin keeps exec from starting a copier that Wait would
	// wait for; ours ends when the channel closes after exit.
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		fmt.Fprintf(s.Stderr(), "sbx: %v\n", err)
		_ = s.Exit(255)
		return
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdinR, s, s.Stderr()
	if err := cmd.Start(); err != nil {
		stdinR.Close()
		stdinW.Close()
		fmt.Fprintf(s.Stderr(), "sbx: %v\n", err)
		_ = s.Exit(127)
		return
	}
	stdinR.Close()
	pgid := cmd.Process.Pid
	e.track(pgid, true)
	stdinDone := make(chan struct{})
	go func() {
		defer close(stdinDone)
		_, _ = io.Copy(stdinW, s)
		stdinW.Close()
	}()
	stopSignals := e.relaySignals(s, pgid)
	err = cmd.Wait()
	stopSignals()
	e.track(pgid, false)
	exitSession(s, cmd, err)
	stdinW.Close() // unblocks a copier stuck writing to a dead process
	<-stdinDone
}

// relaySignals forwards the client's signal requests to the process group
// and kills the group if the connection goes away. The returned func stops
// it; it must run before the session's request loop could block on us.
func (e *embedded) relaySignals(s gliderssh.Session, pgid int) (stop func()) {
	sigs := make(chan gliderssh.Signal, 8)
	s.Signals(sigs)
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		connDone := s.Context().Done()
		for {
			select {
			case sig := <-sigs:
				if n, ok := signalsByName[sig]; ok {
					_ = syscall.Kill(-pgid, n)
				}
			case <-connDone:
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
				connDone = nil
			case <-done:
				return
			}
		}
	}()
	return func() {
		// Unregister first: gliderlabs sends on sigs while holding its
		// session lock, so we keep draining until Signals(nil) returned.
		s.Signals(nil)
		close(done)
		<-finished
	}
}

var signalsByName = map[gliderssh.Signal]syscall.Signal{
	gliderssh.SIGABRT: syscall.SIGABRT, gliderssh.SIGALRM: syscall.SIGALRM,
	gliderssh.SIGFPE: syscall.SIGFPE, gliderssh.SIGHUP: syscall.SIGHUP,
	gliderssh.SIGILL: syscall.SIGILL, gliderssh.SIGINT: syscall.SIGINT,
	gliderssh.SIGKILL: syscall.SIGKILL, gliderssh.SIGPIPE: syscall.SIGPIPE,
	gliderssh.SIGQUIT: syscall.SIGQUIT, gliderssh.SIGSEGV: syscall.SIGSEGV,
	gliderssh.SIGTERM: syscall.SIGTERM, gliderssh.SIGUSR1: syscall.SIGUSR1,
	gliderssh.SIGUSR2: syscall.SIGUSR2,
}

// exitSession reports how the process ended: exit-status, or exit-signal
// (RFC 4254 6.10) when a signal killed it, then closes the channel.
func exitSession(s gliderssh.Session, cmd *exec.Cmd, waitErr error) {
	st := cmd.ProcessState
	if st == nil {
		fmt.Fprintf(s.Stderr(), "sbx: %v\n", waitErr)
		_ = s.Exit(255)
		return
	}
	ws, ok := st.Sys().(syscall.WaitStatus)
	if ok && ws.Signaled() {
		name := ""
		for k, v := range signalsByName {
			if v == ws.Signal() {
				name = string(k)
			}
		}
		if name != "" {
			payload := gossh.Marshal(struct {
				Signal     string
				CoreDumped bool
				Error      string
				Lang       string
			}{name, ws.CoreDump(), "", ""})
			_, _ = s.SendRequest("exit-signal", false, payload)
			// Closing marks nothing in gliderlabs; its own Exit(0) after
			// the handler then fails on the closed channel, as intended.
			_ = s.Close()
			return
		}
		_ = s.Exit(128 + int(ws.Signal()))
		return
	}
	_ = s.Exit(st.ExitCode())
}

func isLoopback(host string) bool {
	switch host {
	case "localhost", "127.0.0.1", "::1":
		return true
	}
	return false
}

// listenLoopback listens on 127.0.0.1:port, or on a fresh port when port
// is 0 or taken.
func listenLoopback(port int) (net.Listener, error) {
	if port > 0 {
		if ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			return ln, nil
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen on loopback: %w", err)
	}
	return ln, nil
}
