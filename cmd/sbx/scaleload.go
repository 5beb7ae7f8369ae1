package main

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/sbxedge/sbx/control/apiclient"
)

// echoTimeout bounds one keystroke's (or request's) round trip: past it
// the connection counts as failed and is dropped.
const echoTimeout = 10 * time.Second

// scaleLoad is what the clients of one run share.
type scaleLoad struct {
	a        *app
	cl       *apiClient
	token    string
	rec      *scaleRecorder
	interval time.Duration
	pinMu    sync.Mutex
	pinned   map[string]bool // broker addresses whose key is pinned
}

// sleepCtx waits d or until ctx ends, reporting whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// failUnlessDone records err unless the run is over (then the error is
// the run's end cutting the connection, not a failure).
func (l *scaleLoad) failUnlessDone(ctx context.Context, kind string, err error) {
	if ctx.Err() == nil {
		l.rec.fail(kind, err)
	}
}

// pin pins the broker's host key once per address, as sbx ssh does
// before every connection.
func (l *scaleLoad) pin(ctx context.Context, tok sshToken) error {
	addr := net.JoinHostPort(tok.Host, strconv.Itoa(tok.Port))
	l.pinMu.Lock()
	defer l.pinMu.Unlock()
	if l.pinned[addr] {
		return nil
	}
	if err := pinBrokerKey(ctx, tok.Host, tok.Port); err != nil {
		return err
	}
	l.pinned[addr] = true
	return nil
}

// sshSession holds one SSH session through the broker, with the
// credential sbx ssh uses, running cat: a byte every interval, timed
// until it comes back.
func (l *scaleLoad) sshSession(ctx context.Context, id string) {
	tok, err := l.a.mintSSHToken(ctx, l.cl, id, 60)
	if err == nil {
		err = l.pin(ctx, tok)
	}
	if err != nil {
		l.failUnlessDone(ctx, kindSSHConn, err)
		return
	}
	signer, err := ssh.ParsePrivateKey([]byte(tok.PrivateKeyPem))
	if err != nil {
		l.failUnlessDone(ctx, kindSSHConn, fmt.Errorf("parse the minted key: %w", err))
		return
	}
	check, err := knownhosts.New(knownHostsFile())
	if err != nil {
		l.failUnlessDone(ctx, kindSSHConn, err)
		return
	}
	addr := net.JoinHostPort(tok.Host, strconv.Itoa(tok.Port))
	cfg := &ssh.ClientConfig{User: tok.Username, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: check, Timeout: echoTimeout}
	start := time.Now()
	conn, err := (&net.Dialer{Timeout: echoTimeout}).DialContext(ctx, "tcp", addr)
	if err != nil {
		l.failUnlessDone(ctx, kindSSHConn, err)
		return
	}
	// The handshake has no context: the run's end closes the connection.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(echoTimeout))
	c, chans, reqs, err := ssh.NewClientConn(conn, addr, cfg)
	if err != nil {
		l.failUnlessDone(ctx, kindSSHConn, err)
		return
	}
	client := ssh.NewClient(c, chans, reqs)
	defer client.Close()
	_ = conn.SetDeadline(time.Time{})
	l.rec.add(kindSSHConn, time.Since(start))

	start = time.Now()
	sess, err := client.NewSession()
	if err != nil {
		l.failUnlessDone(ctx, kindSSHFirst, err)
		return
	}
	defer sess.Close()
	in, err1 := sess.StdinPipe()
	out, err2 := sess.StdoutPipe()
	if err := errors.Join(err1, err2); err != nil {
		l.failUnlessDone(ctx, kindSSHFirst, err)
		return
	}
	if err := sess.Start("cat"); err != nil {
		l.failUnlessDone(ctx, kindSSHFirst, err)
		return
	}
	// Reads from the session have no deadline: a keystroke not back in
	// time closes the connection, which ends the read.
	echo := func() error {
		t := time.AfterFunc(echoTimeout, func() { conn.Close() })
		defer t.Stop()
		if _, err := in.Write([]byte{'x'}); err != nil {
			return err
		}
		var b [1]byte
		if _, err := io.ReadFull(out, b[:]); err != nil {
			if !t.Stop() {
				return fmt.Errorf("%w: %w", errEchoTimeout, err)
			}
			return err
		}
		return nil
	}
	if err := echo(); err != nil {
		l.failUnlessDone(ctx, kindSSHFirst, err)
		return
	}
	l.rec.add(kindSSHFirst, time.Since(start))
	for sleepCtx(ctx, l.interval) {
		t0 := time.Now()
		if err := echo(); err != nil {
			l.failUnlessDone(ctx, kindSSHEcho, err)
			return
		}
		l.rec.add(kindSSHEcho, time.Since(t0))
	}
}

// previewTransport reaches a preview URL: one keep-alive connection per
// client, and *.localhost (sbx dev's preview domain, which browsers
// resolve by themselves) dialled on loopback.
func previewTransport() *http.Transport {
	d := &net.Dialer{Timeout: echoTimeout}
	return &http.Transport{
		MaxIdleConnsPerHost: 1,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, port, err := net.SplitHostPort(addr)
			if err == nil && (host == "localhost" || strings.HasSuffix(host, ".localhost")) {
				addr = net.JoinHostPort("127.0.0.1", port)
			}
			return d.DialContext(ctx, network, addr)
		},
		TLSHandshakeTimeout: echoTimeout,
	}
}

// previewGet fetches u once with the account's token, timing the
// connection (when a new one was opened), the first byte and the whole.
type previewTiming struct{ connect, firstByte, total time.Duration }

func previewGet(ctx context.Context, hc *http.Client, u, token string) (previewTiming, error) {
	var tm previewTiming
	var connStart time.Time
	trace := &httptrace.ClientTrace{
		ConnectStart: func(string, string) { connStart = time.Now() },
		ConnectDone: func(_, _ string, err error) {
			if err == nil {
				tm.connect = time.Since(connStart)
			}
		},
	}
	ctx, cancel := context.WithTimeout(httptrace.WithClientTrace(ctx, trace), echoTimeout)
	defer cancel()
	start := time.Now()
	trace.GotFirstResponseByte = func() { tm.firstByte = time.Since(start) }
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return tm, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		return tm, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	tm.total = time.Since(start)
	if resp.StatusCode != http.StatusOK {
		return tm, &httpStatusError{code: resp.StatusCode}
	}
	return tm, err
}

// previewClient makes a small request every interval on its own
// keep-alive connection.
func (l *scaleLoad) previewClient(ctx context.Context, u string) {
	tr := previewTransport()
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for {
		tm, err := previewGet(ctx, hc, u, l.token)
		if err != nil {
			l.failUnlessDone(ctx, kindPrevReq, err)
		} else {
			if tm.connect > 0 {
				l.rec.add(kindPrevConn, tm.connect)
			}
			l.rec.add(kindPrevFirst, tm.firstByte)
			l.rec.add(kindPrevReq, tm.total)
		}
		if !sleepCtx(ctx, l.interval) {
			return
		}
	}
}

// echoWriter hands the terminal's output to the reader of got.
type echoWriter struct{ got chan []byte }

func (w echoWriter) Write(p []byte) (int, error) {
	w.got <- bytes.Clone(p)
	return len(p), nil
}

// terminalCommand puts the terminal in raw mode without echo, so each
// byte sent reaches cat at once and comes back once, from cat.
const terminalCommand = "stty raw -echo && echo READY && exec cat"

// terminal holds one terminal stream (the API's WebSocket) running cat
// on a raw terminal: a byte every interval, timed until it comes back.
func (l *scaleLoad) terminal(ctx context.Context, id string) {
	cols, rows := 80, 24
	params := apiclient.ExecTerminalStreamParams{Command: ptr(terminalCommand), Cols: &cols, Rows: &rows}
	start := time.Now()
	dctx, cancel := context.WithTimeout(ctx, echoTimeout)
	t, err := apiclient.DialTerminal(dctx, &http.Client{Transport: l.a.transport()}, l.cl.base, l.token, id, params)
	cancel()
	if err != nil {
		l.failUnlessDone(ctx, kindTermConn, err)
		return
	}
	defer t.Close()
	l.rec.add(kindTermConn, time.Since(start))

	start = time.Now()
	got := make(chan []byte, 16)
	done := make(chan error, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer t.Close() // ends Output
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, err := t.Output(octx, echoWriter{got})
		done <- err
		close(got)
	}()
	// await reads output until it holds want, within echoTimeout.
	var pending []byte
	await := func(want []byte) error {
		timer := time.NewTimer(echoTimeout)
		defer timer.Stop()
		for !bytes.Contains(pending, want) {
			select {
			case b, ok := <-got:
				if !ok {
					return fmt.Errorf("terminal stream ended: %w", <-done)
				}
				pending = append(pending, b...)
			case <-timer.C:
				return errEchoTimeout
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		pending = pending[bytes.Index(pending, want)+len(want):]
		return nil
	}
	// drain keeps Output from blocking on got once this returns.
	defer func() {
		ocancel()
		t.Close()
		for range got {
		}
	}()
	if err := await([]byte("READY")); err != nil {
		l.failUnlessDone(ctx, kindTermFirst, err)
		return
	}
	l.rec.add(kindTermFirst, time.Since(start))
	for sleepCtx(ctx, l.interval) {
		t0 := time.Now()
		err := t.Input(ctx, []byte{'x'})
		if err == nil {
			err = await([]byte{'x'})
		}
		if err != nil {
			l.failUnlessDone(ctx, kindTermEcho, err)
			return
		}
		l.rec.add(kindTermEcho, time.Since(t0))
	}
}

// previewURL starts a tiny HTTP server in the sandbox (python3's, on a
// free loopback port), exposes its port and waits until the preview
// answers 200.
func (l *scaleLoad) previewURL(ctx context.Context, gc *apiclient.ClientWithResponses, id string) (string, error) {
	req := apiclient.ExecRequest{Command: previewServerScript, TimeoutSeconds: ptr(30.0)}
	r, err := apiclient.Result(gc.ExecInSandboxWithResponse(ctx, id, req))
	if err != nil {
		return "", fmt.Errorf("start the HTTP server in %s: %w", id, err)
	}
	if r.JSON200 == nil || r.JSON200.ExitCode != 0 {
		detail := ""
		if r.JSON200 != nil {
			detail = strings.TrimSpace(r.JSON200.Stderr)
		}
		return "", fmt.Errorf("start the HTTP server in %s (it needs python3): %s", id, detail)
	}
	port, err := strconv.Atoi(strings.TrimSpace(r.JSON200.Stdout))
	if err != nil {
		return "", fmt.Errorf("the HTTP server in %s: port %q: %w", id, r.JSON200.Stdout, err)
	}
	pr, err := apiclient.Result(l.cl.gen.ExposePortWithResponse(ctx, id, apiclient.PortRequest{Port: port}))
	if err != nil {
		return "", fmt.Errorf("expose port %d of %s: %w", port, id, err)
	}
	if pr.JSON200 == nil && pr.JSON201 == nil {
		return "", fmt.Errorf("expose port %d of %s: the API answered %s without a port", port, id, pr.HTTPResponse.Status)
	}
	p := pr.JSON201
	if p == nil {
		p = pr.JSON200
	}
	u, err := url.JoinPath(p.Url, "/")
	if err != nil {
		return "", fmt.Errorf("preview URL %q: %w", p.Url, err)
	}
	// Until python listens and the edge sees the port, the preview
	// answers 502: that is start-up, not the load.
	tr := previewTransport()
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := previewGet(ctx, hc, u, l.token)
		if err == nil {
			return u, nil
		}
		if time.Now().After(deadline) || !sleepCtx(ctx, 100*time.Millisecond) {
			return "", fmt.Errorf("the preview of %s never answered 200: %w", id, err)
		}
	}
}

//go:embed scaleserve.py
var previewServerPy string

// previewServerScript starts scaleserve.py on a loopback port of its
// choosing and prints the port.
var previewServerScript = `d=$(mktemp -d) && cd "$d" && echo ok > index.html && cat > serve.py <<'SBX_SCALETEST_EOF'
` + previewServerPy + `SBX_SCALETEST_EOF
S=; command -v setsid >/dev/null && S=setsid
$S nohup python3 serve.py > "$d/log" 2>&1 < /dev/null &
i=0; while [ $i -lt 100 ]; do
  p=$(sed -n 's/^port \([0-9][0-9]*\)$/\1/p' "$d/log")
  if [ -n "$p" ]; then echo "$p"; exit 0; fi
  i=$((i+1)); sleep 0.1
done
cat "$d/log" >&2; exit 1`

// previewWebSocket holds one WebSocket through the preview proxy to the
// sandbox's echo server: a one-byte message every interval, timed until
// it comes back.
func (l *scaleLoad) previewWebSocket(ctx context.Context, u string) {
	wsURL, err := url.Parse(u)
	if err != nil {
		l.failUnlessDone(ctx, kindWSConn, err)
		return
	}
	wsURL.Scheme = map[string]string{"http": "ws", "https": "wss"}[wsURL.Scheme]
	wsURL.Path = "/ws"
	tr := previewTransport()
	defer tr.CloseIdleConnections()
	start := time.Now()
	dctx, cancel := context.WithTimeout(ctx, echoTimeout)
	conn, _, err := websocket.Dial(dctx, wsURL.String(), &websocket.DialOptions{
		HTTPClient: &http.Client{Transport: tr}, HTTPHeader: http.Header{"Authorization": {"Bearer " + l.token}},
	})
	cancel()
	if err != nil {
		l.failUnlessDone(ctx, kindWSConn, err)
		return
	}
	defer conn.CloseNow()
	l.rec.add(kindWSConn, time.Since(start))
	for sleepCtx(ctx, l.interval) {
		t0 := time.Now()
		ectx, cancel := context.WithTimeout(ctx, echoTimeout)
		err := conn.Write(ectx, websocket.MessageBinary, []byte{'x'})
		var b []byte
		if err == nil {
			_, b, err = conn.Read(ectx)
		}
		cancel()
		if err == nil && string(b) != "x" {
			err = fmt.Errorf("websocket echo: got %q, want %q", b, "x")
		}
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				err = fmt.Errorf("%w: %w", errEchoTimeout, err)
			}
			l.failUnlessDone(ctx, kindWSEcho, err)
			return
		}
		l.rec.add(kindWSEcho, time.Since(t0))
	}
}
