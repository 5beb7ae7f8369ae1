package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/coder/websocket"
	gossh "golang.org/x/crypto/ssh"
)

// api calls control's REST API at base with the fleet's token.
func (f *fleet) api(ctx context.Context, base, method, path string, in, out any) (int, error) {
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+base+path, body)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+f.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: decode %s: %w", method, path, b, err)
		}
	}
	if resp.StatusCode >= 300 {
		return resp.StatusCode, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	return resp.StatusCode, nil
}

type sbView struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

// createSandbox asks control at base for a sandbox and returns its ID.
func (f *fleet) createSandbox(ctx context.Context, base string) (string, error) {
	var sb sbView
	if _, err := f.api(ctx, base, "POST", "/api/v1/sandboxes", map[string]any{"profile": "tuist-linux-small"}, &sb); err != nil {
		return "", err
	}
	return sb.ID, nil
}

// waitStatus polls through the API balancer until id is want (or one of
// the final states), and returns the status seen last.
func (f *fleet) waitStatus(ctx context.Context, id, want string, limit time.Duration) (string, error) {
	deadline := time.Now().Add(limit)
	var sb sbView
	for {
		if _, err := f.api(ctx, f.apiBase(), "GET", "/api/v1/sandboxes/"+id, nil, &sb); err == nil {
			if sb.Status == want || sb.Status == "failed" || sb.Status == "terminated" {
				if sb.Status != want {
					return sb.Status, fmt.Errorf("sandbox %s is %s, want %s", id, sb.Status, want)
				}
				return sb.Status, nil
			}
		}
		if time.Now().After(deadline) {
			return sb.Status, fmt.Errorf("sandbox %s still %q after %v", id, sb.Status, limit)
		}
		select {
		case <-ctx.Done():
			return sb.Status, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// sshKey mints an SSH credential for id.
func (f *fleet) sshKey(ctx context.Context, id string) (gossh.Signer, error) {
	var tok struct {
		PrivateKeyPEM string `json:"private_key_pem"`
	}
	if _, err := f.api(ctx, f.apiBase(), "POST", "/api/v1/sandboxes/"+id+"/ssh_tokens", nil, &tok); err != nil {
		return nil, err
	}
	return gossh.ParsePrivateKey([]byte(tok.PrivateKeyPEM))
}

// expose makes port of id a private preview and returns its host name.
func (f *fleet) expose(ctx context.Context, id string, port int) (string, error) {
	var pv struct {
		URL string `json:"url"`
	}
	if _, err := f.api(ctx, f.apiBase(), "POST", fmt.Sprintf("/api/v1/sandboxes/%s/ports", id), map[string]any{"port": port}, &pv); err != nil {
		return "", err
	}
	u, err := url.Parse(pv.URL)
	if err != nil {
		return "", err
	}
	return u.Hostname(), nil
}

// conn is one client connection carrying round trips.
type conn interface {
	roundTrip(ctx context.Context, msg string) error
	close()
}

// sshConn is one SSH connection through an edge with one session running
// cat, on a PTY or not (an exec stream).
type sshConn struct {
	client *gossh.Client
	sess   *gossh.Session
	stdin  io.Writer
	out    chan []byte
	buf    []byte
}

func dialSSH(ctx context.Context, edge, user string, key gossh.Signer, pty bool) (*sshConn, error) {
	d := net.Dialer{Timeout: time.Second}
	nc, err := d.DialContext(ctx, "tcp", edge)
	if err != nil {
		return nil, err
	}
	_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
	cc, chans, reqs, err := gossh.NewClientConn(nc, edge, &gossh.ClientConfig{User: user, Auth: []gossh.AuthMethod{gossh.PublicKeys(key)},
		HostKeyCallback: gossh.InsecureIgnoreHostKey(), Timeout: 5 * time.Second}) // loopback test: the edges' key is not what is measured
	if err != nil {
		nc.Close()
		return nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	c := &sshConn{client: gossh.NewClient(cc, chans, reqs), out: make(chan []byte, 64)}
	if err := c.open(pty); err != nil {
		c.client.Close()
		return nil, err
	}
	return c, nil
}

func (c *sshConn) open(pty bool) error {
	s, err := c.client.NewSession()
	if err != nil {
		return err
	}
	if pty {
		if err := s.RequestPty("xterm", 24, 80, gossh.TerminalModes{gossh.ECHO: 0}); err != nil {
			return err
		}
	}
	if c.stdin, err = s.StdinPipe(); err != nil {
		return err
	}
	stdout, err := s.StdoutPipe()
	if err != nil {
		return err
	}
	if err := s.Start("cat"); err != nil {
		return err
	}
	c.sess = s
	go func() { // ends when the session's output does
		defer close(c.out)
		for {
			b := make([]byte, 4096)
			n, err := stdout.Read(b)
			if n > 0 {
				c.out <- b[:n]
			}
			if err != nil {
				return
			}
		}
	}()
	return nil
}

func (c *sshConn) roundTrip(ctx context.Context, msg string) error {
	if _, err := io.WriteString(c.stdin, msg+"\n"); err != nil {
		return err
	}
	t := time.NewTimer(3 * time.Second)
	defer t.Stop()
	for !bytes.Contains(c.buf, []byte(msg)) {
		select {
		case b, ok := <-c.out:
			if !ok {
				return errors.New("session ended")
			}
			c.buf = append(c.buf, b...)
		case <-t.C:
			return errors.New("no echo within 3s")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	i := bytes.Index(c.buf, []byte(msg))
	c.buf = c.buf[i+len(msg):]
	return nil
}

func (c *sshConn) close() { c.client.Close() }

// wsConn is a preview WebSocket to the fleet's echo app through an edge.
type wsConn struct{ c *websocket.Conn }

func (f *fleet) dialWS(ctx context.Context, edge, host string) (*wsConn, error) {
	d := &net.Dialer{Timeout: time.Second}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, edge)
	}}}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://"+host+"/ws", &websocket.DialOptions{HTTPClient: hc,
		HTTPHeader: http.Header{"Authorization": {"Bearer " + f.token}, "Origin": {"http://" + host}}})
	if err != nil {
		return nil, err
	}
	return &wsConn{c: c}, nil
}

func (w *wsConn) roundTrip(ctx context.Context, msg string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := w.c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		return err
	}
	_, b, err := w.c.Read(ctx)
	if err != nil {
		return err
	}
	if !strings.HasSuffix(string(b), msg) {
		return fmt.Errorf("echo %q, want %q", b, msg)
	}
	return nil
}

func (w *wsConn) close() { w.c.CloseNow() }

// apiExecConn is the control-side flow: each round trip is an exec
// through the API balancer (a control replica), echoing msg.
type apiExecConn struct {
	f  *fleet
	id string
}

func (a *apiExecConn) roundTrip(ctx context.Context, msg string) error {
	var res struct {
		Stdout string `json:"stdout"`
	}
	if _, err := a.f.api(ctx, a.f.apiLB.addr(), "POST", "/api/v1/sandboxes/"+a.id+"/exec", map[string]any{"command": "echo " + msg}, &res); err != nil {
		return err
	}
	if !strings.Contains(res.Stdout, msg) {
		return fmt.Errorf("exec stdout %q, want %q", res.Stdout, msg)
	}
	return nil
}

func (a *apiExecConn) close() {}

// ptyStream is control's terminal stream (GET .../exec/stream): cat on a
// pseudo-terminal, over a WebSocket to a control replica through the API
// balancer.
type ptyStream struct {
	c   *websocket.Conn
	buf []byte
}

func (f *fleet) dialPTY(ctx context.Context, id string) (*ptyStream, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	u := "ws://" + f.apiLB.addr() + "/api/v1/sandboxes/" + id + "/exec/stream?command=cat&cols=200&rows=40"
	c, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + f.token}}})
	if err != nil {
		return nil, err
	}
	return &ptyStream{c: c}, nil
}

func (p *ptyStream) roundTrip(ctx context.Context, msg string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := p.c.Write(ctx, websocket.MessageBinary, []byte(msg+"\n")); err != nil {
		return err
	}
	for !bytes.Contains(p.buf, []byte(msg)) {
		typ, b, err := p.c.Read(ctx)
		if err != nil {
			return err
		}
		if typ == websocket.MessageText { // exit or error: the stream is over
			return fmt.Errorf("stream ended: %s", b)
		}
		p.buf = append(p.buf, b...)
	}
	// Keep what follows the last echo of msg (the terminal echoes it,
	// then cat prints it).
	p.buf = p.buf[bytes.LastIndex(p.buf, []byte(msg))+len(msg):]
	return nil
}

func (p *ptyStream) close() { p.c.CloseNow() }
