package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/control/apiclient"
	"github.com/sbxedge/sbx/control/devseed"
)

// scaleRun measures on a started stack; ids are the ready sandboxes.
type scaleRun struct {
	c   *scaleConfig
	st  *scaleStack
	api *apiclient.ClientWithResponses
	ids []string
}

// errCounts tallies errors by a short kind, for the notes.
type errCounts struct {
	mu sync.Mutex
	m  map[string]int
}

func (e *errCounts) add(err error) {
	k := err.Error()
	if len(k) > 200 {
		k = k[:200]
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil {
		e.m = map[string]int{}
	}
	e.m[k]++
}

func (e *errCounts) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.m) == 0 {
		return "no errors"
	}
	var parts []string
	for k, n := range e.m {
		parts = append(parts, fmt.Sprintf("%d× %s", n, k))
	}
	slices.Sort(parts)
	return "errors: " + strings.Join(parts, "; ")
}

func quantile(lat []time.Duration, q float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	slices.Sort(lat)
	return lat[int(q*float64(len(lat)-1))]
}

func msOf(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// creates runs --create-conns creators for --duration (or until
// --sandboxes exist), then makes the rest unmeasured and waits until
// every sandbox is ready.
func (r *scaleRun) creates(ctx context.Context) ([]scaleRow, error) {
	var err error
	if r.api, err = apiclient.New(r.st.apiURL, r.st.token, nil); err != nil {
		return nil, err
	}
	apis := []*apiclient.ClientWithResponses{r.api}
	for _, tok := range r.st.tokens[1:] {
		a, err := apiclient.New(r.st.apiURL, tok, nil)
		if err != nil {
			return nil, err
		}
		apis = append(apis, a)
	}
	var (
		mu   sync.Mutex
		lat  []time.Duration
		errs errCounts
		n    atomic.Int64
	)
	profile := devseed.DefaultProfile
	create := func(ctx context.Context, api *apiclient.ClientWithResponses, timed bool) {
		for ctx.Err() == nil && n.Add(1) <= int64(r.c.Sandboxes) {
			t0 := time.Now()
			resp, err := api.CreateSandboxWithResponse(ctx, nil, apiclient.CreateSandbox{Profile: &profile})
			d := time.Since(t0)
			if err == nil && resp.JSON201 == nil {
				err = fmt.Errorf("create: status %d: %.300s", resp.StatusCode(), resp.Body)
			}
			if err != nil {
				n.Add(-1)
				if ctx.Err() == nil {
					errs.add(err)
				}
				continue
			}
			mu.Lock()
			r.ids = append(r.ids, resp.JSON201.Id)
			if timed {
				lat = append(lat, d)
			}
			mu.Unlock()
		}
	}
	run := func(ctx context.Context, timed bool) time.Duration {
		var wg sync.WaitGroup
		t0 := time.Now()
		for i := range r.c.CreateConns {
			wg.Go(func() { create(ctx, apis[i%len(apis)], timed) })
		}
		wg.Wait()
		return time.Since(t0)
	}
	waits, err := startWaitSampler(ctx, r.st.dbURL)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, r.c.Duration)
	elapsed := run(cctx, true)
	cancel()
	load := loadAvg()
	waitNote := waits.finish()
	timed := len(lat)
	if errs.String() != "no errors" && timed == 0 {
		return nil, fmt.Errorf("no create succeeded: %s", errs.String())
	}
	n.Store(int64(len(r.ids)))
	if !slices.Equal(r.c.Only, []string{"creates"}) {
		// Later steps spread over --sandboxes; the create row alone
		// needs no more than it made.
		fctx, fcancel := context.WithTimeout(ctx, 10*time.Minute)
		run(fctx, false)
		fcancel()
	}
	rate := float64(timed) / elapsed.Seconds()
	p99 := quantile(lat, 0.99)
	rows := []scaleRow{
		{"control creates/s (Postgres, simulated fleet)", "sustained " + r.c.Duration.String() + " (issue: 60 s)",
			fmt.Sprintf("%.0f/s over %.1f s (%d creates)", rate, elapsed.Seconds(), timed), noTarget,
			fmt.Sprintf("%d concurrent creators over %d accounts; %s", r.c.CreateConns, len(apis), errs.String())},
		{"control create p99 of the 201", "< 200 ms", msOf(p99), verdict(p99 < 200*time.Millisecond && p99 > 0),
			fmt.Sprintf("p50 %s; load average %s at the end; %s", msOf(quantile(lat, 0.5)), load, waitNote)},
	}
	ready, med, err := r.waitReady(ctx)
	if err != nil {
		return rows, err
	}
	rows = append(rows, scaleRow{"create→ready (Postgres job queue, simulated provider)", "≤ 90 ms (issue's sbx dev row)",
		"median " + msOf(med), verdict(med <= 90*time.Millisecond), fmt.Sprintf("%d of %d ready", ready, len(r.ids))})
	return rows, nil
}

// waitReady polls the database until every created sandbox is ready (or
// failed), for at most 15 minutes; it returns the ready count and the
// median create→ready.
func (r *scaleRun) waitReady(ctx context.Context) (int, time.Duration, error) {
	db, err := pgx.Connect(ctx, r.st.dbURL)
	if err != nil {
		return 0, 0, err
	}
	defer db.Close(context.Background())
	end := time.Now().Add(15 * time.Minute)
	for {
		var ready, failed int
		var med float64
		err := db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'ready'), count(*) FILTER (WHERE state = 'failed'),
			coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM ready_at - created_at)), 0)
			FROM sandboxes`).Scan(&ready, &failed, &med)
		if err != nil {
			return 0, 0, fmt.Errorf("count ready sandboxes: %w", err)
		}
		if ready+failed >= len(r.ids) {
			if failed > 0 {
				return ready, 0, fmt.Errorf("%d sandboxes failed", failed)
			}
			return ready, time.Duration(med * float64(time.Second)), nil
		}
		if time.Now().After(end) || ctx.Err() != nil {
			return ready, 0, fmt.Errorf("%d of %d sandboxes ready after 15 minutes", ready, len(r.ids))
		}
		time.Sleep(time.Second)
	}
}

// heldSession is one idle SSH session through the edge, running cat.
type heldSession struct {
	client *ssh.Client
	in     io.WriteCloser
	out    io.Reader
}

func (r *scaleRun) openSession(ctx context.Context, id string) (*heldSession, error) {
	tok, err := apiclient.Result(r.api.CreateSSHTokenWithResponse(ctx, id, apiclient.SSHTokenRequest{}))
	if err != nil {
		return nil, fmt.Errorf("mint: %w", err)
	}
	signer, err := ssh.ParsePrivateKey([]byte(tok.JSON201.PrivateKeyPem))
	if err != nil {
		return nil, err
	}
	// The broker is the one this run started, on loopback: its key is
	// not what is measured.
	cfg := &ssh.ClientConfig{User: tok.JSON201.Username, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey(), Timeout: 30 * time.Second}
	client, err := ssh.Dial("tcp", r.st.sshAddr, cfg)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	s, err := client.NewSession()
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("session: %w", err)
	}
	in, _ := s.StdinPipe()
	out, _ := s.StdoutPipe()
	if err := s.Start("cat"); err != nil {
		client.Close()
		return nil, fmt.Errorf("start: %w", err)
	}
	h := &heldSession{client: client, in: in, out: out}
	if _, err := h.echo(); err != nil {
		client.Close()
		return nil, fmt.Errorf("first echo: %w", err)
	}
	return h, nil
}

// echo sends a keystroke and times its echo; a stuck echo closes the
// connection after 10 s, which ends the read.
func (h *heldSession) echo() (time.Duration, error) {
	t := time.AfterFunc(10*time.Second, func() { h.client.Close() })
	defer t.Stop()
	t0 := time.Now()
	if _, err := h.in.Write([]byte{'x'}); err != nil {
		return 0, err
	}
	var b [1]byte
	if _, err := io.ReadFull(h.out, b[:]); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

// parallel runs f(i) for i in [from, to) on workers goroutines.
func parallel(ctx context.Context, from, to, workers int, f func(i int)) {
	var next atomic.Int64
	next.Store(int64(from))
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= to {
					return
				}
				f(i)
			}
		})
	}
	wg.Wait()
}

// settle gives the edge a moment after a burst (its GC and freed
// buffers) before its memory is read.
func settle() { time.Sleep(5 * time.Second) }

// edgeGauges reads the edge's goroutines and Go heap in use from its
// /metrics (zero when it cannot): where a session's memory goes.
func (r *scaleRun) edgeGauges() (goroutines, heap float64) {
	resp, err := http.Get("http://" + r.st.edgeMetrics + "/metrics")
	if err != nil {
		return 0, 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	for line := range strings.SplitSeq(string(b), "\n") {
		name, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
		switch name {
		case "go_goroutines":
			goroutines = f
		case "go_memstats_heap_inuse_bytes":
			heap = f
		}
	}
	return goroutines, heap
}

func (r *scaleRun) edgePss() int64 {
	v, _ := procPss(r.st.edge.Process.Pid)
	return v
}

// sessions holds one idle session per sandbox up to each --sessions
// count and reads the edge's PSS at each, then runs the Redis window
// with keystrokes on all of them.
func (r *scaleRun) sessions(ctx context.Context) ([]scaleRow, error) {
	if len(r.c.Sessions) == 0 {
		return nil, nil
	}
	settle()
	base := r.edgePss()
	g0, h0 := r.edgeGauges()
	held := make([]*heldSession, r.c.Sessions[len(r.c.Sessions)-1])
	defer func() {
		parallel(context.Background(), 0, len(held), 64, func(i int) {
			if held[i] != nil {
				held[i].client.Close()
			}
		})
	}()
	var errs errCounts
	var rows []scaleRow
	from := 0
	for _, n := range r.c.Sessions {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		t0 := time.Now()
		parallel(lctx, from, n, 32, func(i int) {
			h, err := r.openSession(lctx, r.ids[i%len(r.ids)])
			if err != nil {
				errs.add(err)
				return
			}
			held[i] = h
		})
		cancel()
		open := 0
		for _, h := range held[:n] {
			if h != nil {
				open++
			}
		}
		took := time.Since(t0)
		settle()
		pss := r.edgePss()
		per := float64(pss-base) / float64(max(open, 1)) / 1024
		g, h := r.edgeGauges()
		fds := r.fdNote()
		rows = append(rows, scaleRow{fmt.Sprintf("edge PSS per idle SSH session at %d", n), "≤ 64 KiB",
			fmt.Sprintf("%.1f KiB (%d open; edge %.0f MiB, %.0f MiB before)", per, open, float64(pss)/(1<<20), float64(base)/(1<<20)),
			verdict(per <= 64 && open == n), fmt.Sprintf("%.1f goroutines and %.0f KiB Go heap in use a session; opened in %.0f s; %s; %s",
				(g-g0)/float64(max(open, 1)), (h-h0)/float64(max(open, 1))/1024, took.Seconds(), errs.String(), fds)})
		from = n
	}
	rows = append(rows, scaleRow{"idle SSH sessions on one edge", fmt.Sprintf("%d", r.c.Sessions[len(r.c.Sessions)-1]),
		fmt.Sprint(countOpen(held)), verdict(countOpen(held) == len(held)), ""})
	redisRows, err := r.redisWindow(ctx, held)
	return append(rows, redisRows...), err
}

func countOpen(held []*heldSession) int {
	n := 0
	for _, h := range held {
		if h != nil {
			n++
		}
	}
	return n
}

// redisStats reads the private Redis's command calls (less INFO's own)
// and network bytes.
func redisStats(ctx context.Context, rdb *redis.Client) (calls map[string]int64, netBytes int64, err error) {
	cs, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, 0, err
	}
	calls = map[string]int64{}
	for line := range strings.SplitSeq(cs, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" {
			continue
		}
		v, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, _ := strconv.ParseInt(v, 10, 64)
		calls[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	st, err := rdb.Info(ctx, "stats").Result()
	if err != nil {
		return nil, 0, err
	}
	for line := range strings.SplitSeq(st, "\n") {
		for _, k := range []string{"total_net_input_bytes:", "total_net_output_bytes:"} {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), k); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				netBytes += n
			}
		}
	}
	return calls, netBytes, nil
}

// redisWindow sends keystrokes round the held sessions for --traffic and
// reads what Redis did meanwhile. The edge flushes activity once a
// second (redisstore's default), so a second's figures are a flush's.
func (r *scaleRun) redisWindow(ctx context.Context, held []*heldSession) ([]scaleRow, error) {
	rdb := redis.NewClient(&redis.Options{Addr: r.st.redisAddr})
	defer rdb.Close()
	c0, b0, err := redisStats(ctx, rdb)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, r.c.Traffic)
	defer cancel()
	var (
		mu      sync.Mutex
		lat     []time.Duration
		errs    errCounts
		touched atomic.Int64
	)
	t0 := time.Now()
	// A trickle, as people type: each session a keystroke a second.
	for wctx.Err() == nil {
		next := time.Now().Add(time.Second)
		parallel(wctx, 0, len(held), 64, func(i int) {
			if held[i] == nil {
				return
			}
			d, err := held[i].echo()
			if err != nil {
				errs.add(err)
				held[i] = nil
				return
			}
			touched.Add(1)
			mu.Lock()
			lat = append(lat, d)
			mu.Unlock()
		})
		select {
		case <-wctx.Done():
		case <-time.After(time.Until(next)):
		}
	}
	secs := time.Since(t0).Seconds()
	c1, b1, err := redisStats(ctx, rdb)
	if err != nil {
		return nil, err
	}
	var total int64
	var top []string
	for k, v := range c1 {
		if d := v - c0[k]; d > 0 {
			total += d
			top = append(top, fmt.Sprintf("%s %.0f/s", k, float64(d)/secs))
		}
	}
	slices.Sort(top)
	perSec := float64(total) / secs
	keysPerSec := float64(touched.Load()) / secs
	return []scaleRow{
		{fmt.Sprintf("Redis commands/s, %d sessions with keystrokes", countOpen(held)), "≤ 1 per active sandbox per flush",
			fmt.Sprintf("%.0f/s (%.0f sessions typed in per s)", perSec, keysPerSec),
			verdict(perSec <= max(keysPerSec, float64(countOpen(held)))+10), strings.Join(top, ", ")},
		{"Redis bytes per flush (in+out, 1 s flush)", noTarget, fmt.Sprintf("%.0f KiB", float64(b1-b0)/secs/1024), noTarget,
			fmt.Sprintf("keystroke echo p50 %s p99 %s over %d; %s", msOf(quantile(lat, 0.5)), msOf(quantile(lat, 0.99)), len(lat), errs.String())},
	}, nil
}

// expose makes port of sandbox id reachable at access; it returns the
// preview host (with the edge's port).
func (r *scaleRun) expose(ctx context.Context, id string, port int, access apiclient.PortRequestAccess) (string, error) {
	resp, err := apiclient.Result(r.api.ExposePortWithResponse(ctx, id, apiclient.PortRequest{Port: port, Access: &access}))
	if err != nil {
		return "", fmt.Errorf("expose port %d of %s: %w", port, id, err)
	}
	p := resp.JSON201
	if p == nil {
		p = resp.JSON200
	}
	u, err := url.Parse(p.Url)
	if err != nil {
		return "", err
	}
	_, edgePort, _ := net.SplitHostPort(r.st.previewAddr)
	return net.JoinHostPort(u.Hostname(), edgePort), nil
}

// previewClient dials the edge's preview listener whatever the host.
func (r *scaleRun) previewClient() *http.Client {
	d := &net.Dialer{Timeout: 30 * time.Second}
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", r.st.previewAddr)
		},
		MaxConnsPerHost: 0, DisableCompression: true,
	}}
}

// websocketsPerHost keeps each preview host under the edge's in-flight
// ceiling per host (512).
const websocketsPerHost = 250

// websockets holds --websockets echo sockets through the preview proxy,
// spread over public ports of several sandboxes, and reads the edge's
// memory per socket and an echo round on every socket.
func (r *scaleRun) websockets(ctx context.Context) ([]scaleRow, error) {
	if r.c.WebSockets == 0 {
		return nil, nil
	}
	nHosts := min((r.c.WebSockets+websocketsPerHost-1)/websocketsPerHost, len(r.ids))
	hosts := make([]string, nHosts)
	for i := range hosts {
		h, err := r.expose(ctx, r.ids[i], r.st.appPorts[0], apiclient.PortRequestAccessPublic)
		if err != nil {
			return nil, err
		}
		hosts[i] = h
	}
	settle()
	base := r.edgePss()
	cl := r.previewClient()
	conns := make([]*websocket.Conn, r.c.WebSockets)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.CloseNow()
			}
		}
	}()
	var errs errCounts
	octx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	t0 := time.Now()
	parallel(octx, 0, len(conns), 32, func(i int) {
		dctx, dcancel := context.WithTimeout(octx, 10*time.Second)
		defer dcancel()
		c, _, err := websocket.Dial(dctx, "ws://"+hosts[i%len(hosts)]+"/ws", &websocket.DialOptions{HTTPClient: cl})
		if err != nil {
			errs.add(err)
			return
		}
		conns[i] = c
	})
	cancel()
	took := time.Since(t0)
	open := 0
	for _, c := range conns {
		if c != nil {
			open++
		}
	}
	settle()
	pss := r.edgePss()
	fds := r.fdNote()
	per := float64(pss-base) / float64(max(open, 1)) / 1024
	var mu sync.Mutex
	var lat []time.Duration
	ectx, ecancel := context.WithTimeout(ctx, 5*time.Minute)
	parallel(ectx, 0, len(conns), 64, func(i int) {
		c := conns[i]
		if c == nil {
			return
		}
		rctx, rcancel := context.WithTimeout(ectx, 10*time.Second)
		defer rcancel()
		t := time.Now()
		if err := c.Write(rctx, websocket.MessageText, []byte("keystroke")); err != nil {
			errs.add(err)
			return
		}
		if _, _, err := c.Read(rctx); err != nil {
			errs.add(err)
			return
		}
		mu.Lock()
		lat = append(lat, time.Since(t))
		mu.Unlock()
	})
	ecancel()
	return []scaleRow{
		{"WebSockets open through one edge", fmt.Sprint(r.c.WebSockets), fmt.Sprintf("%d (opened in %.0f s, %d hosts)", open, took.Seconds(), nHosts),
			verdict(open == r.c.WebSockets), errs.String() + "; " + fds},
		{"edge PSS per WebSocket", "≤ 64 KiB (the SSH target; the issue sets none)", fmt.Sprintf("%.1f KiB (edge %.0f MiB)", per, float64(pss)/(1<<20)),
			verdict(per <= 64), "upstream leg through each sandbox's podtcp forwarder"},
		{"WebSocket echo p99, all sockets open", noTarget, msOf(quantile(lat, 0.99)), noTarget,
			fmt.Sprintf("p50 %s over %d echoes, 64 at a time", msOf(quantile(lat, 0.5)), len(lat))},
	}, nil
}

// scaleCookie seals a preview session cookie the way edge/preview's
// sealer does (HMAC-SHA256 over base64url JSON under the session key),
// standing for a browser that signed in through the OIDC provider. Kept
// in step with edge/preview/seal.go by hand: if the format changes, the
// session row fails with 401s rather than measuring something else.
func scaleCookie(key []byte, label, sandboxID, accountID, subject string) string {
	body, _ := json.Marshal(map[string]string{"h": label, "s": sandboxID, "a": accountID, "u": subject})
	env, _ := json.Marshal(map[string]any{"p": "session", "e": time.Now().Add(time.Hour).Unix(), "b": json.RawMessage(body)})
	payload := base64.RawURLEncoding.EncodeToString(env)
	m := hmac.New(sha256.New, key)
	m.Write([]byte(payload))
	return "__Host-sbx-preview=" + payload + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// private compares a private port, reached with the account's token and
// with a signed-in browser's cookie, with a public port of the same
// sandbox, in rotated rounds.
func (r *scaleRun) private(ctx context.Context) ([]scaleRow, error) {
	id := r.ids[0]
	pub, err := r.expose(ctx, id, r.st.appPorts[0], apiclient.PortRequestAccessPublic)
	if err != nil {
		return nil, err
	}
	priv, err := r.expose(ctx, id, r.st.appPorts[1], apiclient.PortRequestAccessPrivate)
	if err != nil {
		return nil, err
	}
	label, _, _ := strings.Cut(priv, ".")
	cookie := scaleCookie(r.st.sessionKey, label, id, r.st.accountID, r.st.issuer+"#"+scaleSubject)
	paths := []path{
		{name: "public", addr: r.st.previewAddr, host: pub},
		{name: "private-token", addr: r.st.previewAddr, host: priv, header: http.Header{"Authorization": {"Bearer " + r.st.token}}},
		{name: "private-session", addr: r.st.previewAddr, host: priv, header: http.Header{"Cookie": {cookie}}},
	}
	rps := map[string][]float64{}
	p99 := map[string][]float64{}
	pc := previewConfig{Duration: r.c.PrevDur}
	for round := range r.c.PrevRounds {
		for i := range paths {
			p := paths[(i+round)%len(paths)]
			res, err := smallRequests(ctx, p, pc, r.c.PrevConns)
			if err != nil {
				return nil, fmt.Errorf("private preview, %s: %w", p.name, err)
			}
			rps[p.name] = append(rps[p.name], res.rps)
			p99[p.name] = append(p99[p.name], res.p99)
		}
	}
	base := median(rps["public"])
	rows := []scaleRow{{"preview req/s, public port", noTarget, fmt.Sprintf("%.0f req/s", base), noTarget,
		fmt.Sprintf("p99 %.0f µs; %d conns, %d rounds × %v, medians", median(p99["public"]), r.c.PrevConns, r.c.PrevRounds, r.c.PrevDur)}}
	for _, name := range []string{"private-token", "private-session"} {
		ratio := median(rps[name]) / base
		rows = append(rows, scaleRow{"preview req/s, " + name + " / public", "≥ 0.9×", fmt.Sprintf("%.2f× (%.0f req/s)", ratio, median(rps[name])),
			verdict(ratio >= 0.9), fmt.Sprintf("p99 %.0f µs", median(p99[name]))})
	}
	if len(rps["public"]) == 0 {
		return rows, errors.New("no preview round ran")
	}
	return rows, nil
}
