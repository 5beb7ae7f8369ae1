package simfleet

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/internal/netlimit"
)

// handshakeTimeout bounds a connection's SSH handshake.
const handshakeTimeout = 10 * time.Second

// server is one sandbox's SSH endpoint.
type server struct {
	cfg *ssh.ServerConfig
	log *slog.Logger
}

func newServer(hostKey ssh.Signer, ca ssh.PublicKey, user string, log *slog.Logger) *server {
	checker := &ssh.CertChecker{IsUserAuthority: func(k ssh.PublicKey) bool { return bytes.Equal(k.Marshal(), ca.Marshal()) }}
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(meta ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
		// As a sandbox's sshd: only the CA's user certificates naming
		// the login user; CertChecker.Authenticate alone would take an
		// empty principal list as "anyone".
		cert, ok := key.(*ssh.Certificate)
		if !ok || cert.CertType != ssh.UserCert || meta.User() != user || len(cert.ValidPrincipals) == 0 {
			return nil, errors.New("simfleet: want a user certificate for " + user)
		}
		return checker.Authenticate(meta, key)
	}}
	cfg.AddHostKey(hostKey)
	return &server{cfg: cfg, log: log}
}

// serve accepts on ln until ctx ends, then closes ln and every
// connection and returns once their goroutines are done.
func (s *server) serve(ctx context.Context, ln net.Listener) {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns = map[net.Conn]struct{}{}
	)
	stop := context.AfterFunc(ctx, func() {
		_ = ln.Close()
		mu.Lock()
		for c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
	})
	defer stop()
	defer wg.Wait()
	var delay netlimit.Backoff
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() == nil && netlimit.Temporary(err) {
				time.Sleep(delay.Next())
				continue
			}
			return
		}
		delay.Reset()
		mu.Lock()
		if ctx.Err() != nil {
			mu.Unlock()
			_ = c.Close()
			return
		}
		conns[c] = struct{}{}
		mu.Unlock()
		wg.Go(func() {
			defer func() {
				mu.Lock()
				delete(conns, c)
				mu.Unlock()
				_ = c.Close()
			}()
			s.serveConn(c)
		})
	}
}

func (s *server) serveConn(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	sc, chans, reqs, err := ssh.NewServerConn(c, s.cfg)
	if err != nil {
		s.log.Debug("simfleet: handshake failed", "err", err)
		return
	}
	defer sc.Close()
	_ = c.SetDeadline(time.Time{})
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { ssh.DiscardRequests(reqs) })
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "simfleet: sessions only")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			continue
		}
		wg.Go(func() { session(ch, creqs) })
	}
}

// session answers a session's requests; the first shell, exec or
// subsystem decides what it does.
func session(ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	started := false
	done := make(chan struct{})
	for {
		select {
		case r, ok := <-reqs:
			if !ok {
				if started {
					<-done
				}
				return
			}
			switch {
			case started && (r.Type == "shell" || r.Type == "exec" || r.Type == "subsystem"):
				_ = r.Reply(false, nil)
			case r.Type == "shell", r.Type == "exec":
				started = true
				var cmd string
				if r.Type == "exec" {
					var p struct{ Command string }
					if ssh.Unmarshal(r.Payload, &p) != nil {
						_ = r.Reply(false, nil)
						return
					}
					cmd = p.Command
				}
				_ = r.Reply(true, nil)
				go func() { defer close(done); run(ch, r.Type == "shell", cmd) }()
			case r.Type == "subsystem":
				// No init and no sftp here.
				_ = r.Reply(false, nil)
			default: // pty-req, env, window-change, signal, ...
				if r.WantReply {
					_ = r.Reply(true, nil)
				}
			}
		case <-done:
			// Requests still coming (a window change) must be read, or
			// the connection's loop would wait on this channel.
			go ssh.DiscardRequests(reqs)
			return
		}
	}
}

// run is the sandbox's one program: an echo.
func run(ch ssh.Channel, shell bool, line string) {
	cmd := command(ch, line)
	f := strings.Fields(cmd)
	status := 0
	switch {
	case shell || cmd == "cat":
		_, _ = io.Copy(ch, ch)
	case len(f) > 0 && f[0] == "echo" && !strings.ContainsAny(cmd, "<>|;&"):
		_, _ = fmt.Fprintln(ch, strings.Join(f[1:], " "))
	case len(f) > 0 && f[0] == "false":
		status = 1
	}
	_ = ch.CloseWrite()
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(status))
	_, _ = ch.SendRequest("exit-status", false, b[:])
}

// pidPrefix and timeoutWord are the frame podssh.ExecRequest.CommandLine
// puts around a command: the pid line on stderr (which podssh.Exec
// reads first) and `exec timeout -k K S` before the program.
const (
	pidPrefix   = `echo "$$" >&2 && `
	timeoutWord = "exec timeout -k "
)

// command unwraps podssh's exec line (answering its pid line with a
// made-up pid) to the command inside: the script of `sh -c`, or the
// program and its arguments. A line without the frame is the command.
func command(ch ssh.Channel, line string) string {
	rest, ok := strings.CutPrefix(line, pidPrefix)
	if !ok {
		return line
	}
	_, _ = io.WriteString(ch.Stderr(), "1\n")
	i := strings.Index(rest, timeoutWord)
	if i < 0 {
		return rest
	}
	// After "exec timeout -k K S ": the quoted words.
	f := strings.SplitN(rest[i+len(timeoutWord):], " ", 3)
	if len(f) < 3 {
		return ""
	}
	words := unquote(f[2])
	if len(words) == 3 && words[0] == "sh" && words[1] == "-c" {
		return words[2]
	}
	return strings.Join(words, " ")
}

// unquote splits s into words the way sh reads podssh.ShellQuote's
// output: single-quoted runs, backslash escapes and bare characters.
func unquote(s string) []string {
	var (
		words []string
		cur   strings.Builder
		in    bool // inside a word
	)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				j = len(s) - i - 1
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			in = true
		case c == '\\' && i+1 < len(s):
			cur.WriteByte(s[i+1])
			i++
			in = true
		case c == ' ':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}
