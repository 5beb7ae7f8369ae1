package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/sync/errgroup"
)

// row is one line of the report: the baseline, the broker, and their ratio.
type row struct {
	name, unit     string
	direct, broker float64
	note           string
	higherIsBetter bool
	directNA       bool // the baseline cannot be measured in this mode
}

func (e *sshEnv) want(s string) bool {
	return e.cfg.Only == "" || slices.Contains(strings.Split(e.cfg.Only, ","), s)
}

// runAll runs the chosen scenarios and returns the report rows.
func (e *sshEnv) runAll(ctx context.Context) ([]row, error) {
	var rows []row
	add := func(r row) {
		rows = append(rows, r)
		fmt.Fprintf(os.Stderr, "  done: %s\n", r.name)
	}
	fmt.Fprintf(os.Stderr, "loadtest ssh: sandbox server %s at %s, broker at %s (pid %d)\n",
		e.cfg.Server, e.direct.addr, e.broker.t.addr, e.broker.pid())
	if e.want("bulk") || e.want("cpu") {
		single, err := e.bulkPair(ctx, 1)
		if err != nil {
			return nil, err
		}
		multi, err := e.bulkPair(ctx, e.cfg.Streams)
		if err != nil {
			return nil, err
		}
		add(row{name: "bulk, 1 stream", unit: "MiB/s", direct: single.direct.mibps(), broker: single.broker.mibps(), higherIsBetter: true})
		add(row{name: fmt.Sprintf("bulk, %d streams", e.cfg.Streams), unit: "MiB/s", direct: multi.direct.mibps(), broker: multi.broker.mibps(), higherIsBetter: true})
		gib := float64(single.broker.bytes+multi.broker.bytes) / (1 << 30)
		dgib := float64(single.direct.bytes+multi.direct.bytes) / (1 << 30)
		add(row{name: "CPU per GiB relayed", unit: "CPU-s/GiB",
			direct: (single.direct.serverCPU + multi.direct.serverCPU).Seconds() / dgib,
			broker: (single.broker.brokerCPU + multi.broker.brokerCPU).Seconds() / gib,
			note:   "direct column: the sandbox sshd's own CPU for the same bytes", directNA: e.serverPID == 0})
	}
	if e.want("cipher") && e.cfg.UpstreamCiphers != "" {
		alt, err := e.startBroker(e.cfg.UpstreamCiphers)
		if err != nil {
			return nil, err
		}
		gcm, err := e.bulk(ctx, e.broker.t, e.broker.pid(), 1)
		if err != nil {
			return nil, err
		}
		other, err := e.bulk(ctx, alt.t, alt.pid(), 1)
		if err != nil {
			return nil, err
		}
		add(row{name: "broker CPU/GiB, upstream " + alt.t.name[len("broker/"):] + " vs default (AES-GCM)", unit: "CPU-s/GiB",
			direct: other.brokerCPU.Seconds() / (float64(other.bytes) / (1 << 30)),
			broker: gcm.brokerCPU.Seconds() / (float64(gcm.bytes) / (1 << 30)),
			note:   "direct column: broker with the alternative upstream cipher"})
	}
	if e.want("handshake") {
		d, b, err := directAndBroker(ctx, e, e.handshakes)
		if err != nil {
			return nil, err
		}
		add(row{name: fmt.Sprintf("handshakes (connect+auth+`true`, %d concurrent)", e.cfg.HandshakeConc), unit: "per s", direct: d, broker: b, higherIsBetter: true})
	}
	if e.want("keystroke") {
		ks, err := e.keystrokeRounds(ctx)
		if err != nil {
			return nil, err
		}
		for _, r := range ks {
			add(r)
		}
	}
	if e.want("memory") {
		d, err := e.idleMemory(ctx, e.direct, e.serverPID)
		if err != nil {
			return nil, err
		}
		b, err := e.idleMemory(ctx, e.broker.t, e.broker.pid())
		if err != nil {
			return nil, err
		}
		add(row{name: fmt.Sprintf("memory per idle session (%d held)", e.cfg.Sessions), unit: "KiB (PSS)", direct: d / 1024, broker: b / 1024,
			note: "direct column: the sandbox sshd's process tree", directNA: e.serverPID == 0})
	}
	return rows, nil
}

func report(out io.Writer, rows []row) {
	w := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintf(w, "scenario\tunit\tdirect\tbroker\tbroker/direct\n")
	for _, r := range rows {
		d, ratio := fmt.Sprintf("%.1f", r.direct), fmt.Sprintf("%.2f", r.broker/r.direct)
		if r.directNA {
			d, ratio = "n/a", "n/a"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%.1f\t%s\n", r.name, r.unit, d, r.broker, ratio)
	}
	w.Flush()
	for _, r := range rows {
		if r.note != "" {
			fmt.Fprintf(out, "  %s: %s\n", r.name, r.note)
		}
	}
}

// bulkResult is one bulk run.
type bulkResult struct {
	bytes     int64
	elapsed   time.Duration
	serverCPU time.Duration // the sandbox sshd tree, when measurable
	brokerCPU time.Duration // the broker process, when it was in the path
}

func (r bulkResult) mibps() float64 { return float64(r.bytes) / (1 << 20) / r.elapsed.Seconds() }

type pair struct{ direct, broker bulkResult }

// directAndBroker runs the same measurement straight to the sandbox and
// then through the broker.
func directAndBroker[T any](ctx context.Context, e *sshEnv, measure func(context.Context, target) (T, error)) (direct, broker T, err error) {
	if direct, err = measure(ctx, e.direct); err != nil {
		return direct, broker, err
	}
	broker, err = measure(ctx, e.broker.t)
	return direct, broker, err
}

func (e *sshEnv) bulkPair(ctx context.Context, streams int) (pair, error) {
	d, err := e.bulk(ctx, e.direct, 0, streams)
	if err != nil {
		return pair{}, err
	}
	b, err := e.bulk(ctx, e.broker.t, e.broker.pid(), streams)
	return pair{d, b}, err
}

// bulk downloads BulkBytes from the sandbox (`head -c N /dev/zero`) over
// streams connections at once, and reads the CPU the sandbox sshd and the
// broker (brokerPID, 0 if not in the path) spent meanwhile.
func (e *sshEnv) bulk(ctx context.Context, t target, brokerPID, streams int) (bulkResult, error) {
	per := e.cfg.BulkBytes / int64(streams)
	cpu := func() (srv, brk time.Duration) {
		if e.serverPID != 0 {
			srv, _ = procCPU(e.serverPID, true)
		}
		if brokerPID != 0 {
			brk, _ = procCPU(brokerPID, false)
		}
		return
	}
	srv0, brk0 := cpu()
	start := time.Now()
	var total atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	for range streams {
		g.Go(func() error {
			c, err := dial(gctx, t)
			if err != nil {
				return err
			}
			defer c.Close()
			s, err := c.NewSession()
			if err != nil {
				return err
			}
			out, _ := s.StdoutPipe()
			if err := s.Start(fmt.Sprintf("head -c %d /dev/zero", per)); err != nil {
				return err
			}
			n, err := io.Copy(io.Discard, out)
			total.Add(n)
			if err != nil {
				return err
			}
			if n != per {
				return fmt.Errorf("%s: got %d bytes, want %d", t.name, n, per)
			}
			return s.Wait()
		})
	}
	if err := g.Wait(); err != nil {
		return bulkResult{}, fmt.Errorf("bulk via %s: %w", t.name, err)
	}
	elapsed := time.Since(start)
	// sshd's per-connection processes add to the listener's CPU when it
	// reaps them, just after the connections close.
	time.Sleep(500 * time.Millisecond)
	srv1, brk1 := cpu()
	return bulkResult{bytes: total.Load(), elapsed: elapsed, serverCPU: srv1 - srv0, brokerCPU: brk1 - brk0}, nil
}

func dial(ctx context.Context, t target) (*ssh.Client, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", t.addr)
	if err != nil {
		return nil, err
	}
	conn, chans, reqs, err := ssh.NewClientConn(nc, t.addr, t.cfg)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("ssh to %s: %w", t.name, err)
	}
	return ssh.NewClient(conn, chans, reqs), nil
}

// handshakes counts complete new connections (key exchange, auth, an exec
// of `true`, close) per second.
func (e *sshEnv) handshakes(ctx context.Context, t target) (float64, error) {
	// Workers start new handshakes until end; the ones in flight then
	// finish under ctx, so the count and the elapsed time match.
	end := time.Now().Add(e.cfg.HandshakeFor)
	var n atomic.Int64
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	for range e.cfg.HandshakeConc {
		g.Go(func() error {
			// At least one each, however late the worker starts.
			for first := true; first || time.Now().Before(end); first = false {
				c, err := dial(gctx, t)
				if err != nil {
					return fmt.Errorf("handshake via %s: %w", t.name, err)
				}
				s, err := c.NewSession()
				if err == nil {
					err = s.Run("true")
				}
				c.Close()
				if err != nil {
					return fmt.Errorf("handshake via %s: %w", t.name, err)
				}
				n.Add(1)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	return float64(n.Load()) / time.Since(start).Seconds(), nil
}

type rtt struct{ p50, p99 float64 } // microseconds

// keystrokeRounds times keystrokes direct, through the broker and through
// a plain Go TCP relay (the hop alone: the floor for any relay in the
// middle), in KeystrokeRounds rounds whose order rotates, so that no
// column always runs first or right after another. The relay runs in a
// process of its own, as the broker does: in the loadtest's process it
// would be spared the wake-ups of a second process on the same cores
// (measured 60-90 µs less), and the broker's overhead over it would read
// as the SSH relay's own when it is not.
func (e *sshEnv) keystrokeRounds(ctx context.Context) ([]row, error) {
	cmd, stdin, relayAddr, err := startChild("TCP relay", tcpRelayChildCmd, e.direct.addr)
	if err != nil {
		return nil, err
	}
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	relay := target{name: "tcp-relay", addr: relayAddr, cfg: e.direct.cfg}
	targets := []target{e.direct, e.broker.t, relay}
	got := make([][]rtt, len(targets))
	for i := range e.cfg.KeystrokeRounds {
		for j := range targets {
			k := (i + j) % len(targets)
			r, err := e.keystrokes(ctx, targets[k])
			if err != nil {
				return nil, err
			}
			got[k] = append(got[k], r)
		}
	}
	p50 := func(k int) []float64 {
		var v []float64
		for _, r := range got[k] {
			v = append(v, r.p50)
		}
		return v
	}
	p99 := func(k int) []float64 {
		var v []float64
		for _, r := range got[k] {
			v = append(v, r.p99)
		}
		return v
	}
	// The overheads per round, then their median: the rounds see
	// different machines (load from elsewhere moves all three together).
	over := func(k int) []float64 {
		d, x := p50(0), p50(k)
		v := make([]float64, len(d))
		for i := range d {
			v[i] = x[i] - d[i]
		}
		return v
	}
	rng := func(v []float64) string {
		return fmt.Sprintf("median of %d rounds [%.0f-%.0f]", len(v), slices.Min(v), slices.Max(v))
	}
	brokerOver, relayOver := over(1), over(2)
	return []row{
		{name: "keystroke round trip, median", unit: "µs", direct: median(p50(0)), broker: median(p50(1)),
			note: "broker " + rng(p50(1)) + "; direct " + rng(p50(0))},
		{name: "keystroke round trip, p99", unit: "µs", direct: median(p99(0)), broker: median(p99(1))},
		{name: "keystroke via plain TCP relay, median", unit: "µs", direct: median(p50(0)), broker: median(p50(2)),
			note: "broker column: a Go TCP relay (a read/write loop each way) in its own process in front of the same server; " + rng(p50(2))},
		{name: "keystroke overhead: broker vs TCP relay", unit: "µs", direct: median(relayOver), broker: median(brokerOver),
			note: "each column minus direct, per round: the broker's overhead against the hop's own; broker " + rng(brokerOver) + ", relay " + rng(relayOver)},
	}, nil
}

// keystrokes types one byte at a time into `cat` under a raw-mode pty and
// times each echo, as a shell's line editor would see it.
func (e *sshEnv) keystrokes(ctx context.Context, t target) (rtt, error) {
	c, err := dial(ctx, t)
	if err != nil {
		return rtt{}, err
	}
	defer c.Close()
	s, err := c.NewSession()
	if err != nil {
		return rtt{}, err
	}
	// Raw mode: no local echo and no line buffering, so every byte goes to
	// cat and back on its own.
	if err := s.RequestPty("xterm", 24, 80, ssh.TerminalModes{ssh.ECHO: 0, ssh.ICANON: 0, ssh.ISIG: 0, ssh.OPOST: 0}); err != nil {
		return rtt{}, err
	}
	in, _ := s.StdinPipe()
	out, _ := s.StdoutPipe()
	// The embedded server ignores the terminal modes asked for above:
	// its tty echoes, line by line, until stty runs. Bytes typed before
	// then come back from the tty's echo and again, in a batch, from cat,
	// and a later keystroke would find its letter already waiting (the
	// 2-85 µs figures). So nothing is typed until the shell says the tty
	// is raw and silent; from then on only cat answers.
	const ready = "sbx-tty-ready"
	if err := s.Start("stty raw -echo && printf " + ready + " && exec cat"); err != nil {
		return rtt{}, err
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	buf := make([]byte, 1)
	for seen := ""; !strings.HasSuffix(seen, ready); {
		if _, err := io.ReadFull(out, buf); err != nil {
			return rtt{}, fmt.Errorf("keystrokes via %s: waiting for the raw tty: %w", t.name, err)
		}
		seen = seen[max(0, len(seen)-len(ready)):] + string(buf)
	}
	// One round trip first, so cat's start-up is not measured.
	if _, err := in.Write([]byte{'.'}); err != nil {
		return rtt{}, err
	}
	for buf[0] != '.' {
		if _, err := io.ReadFull(out, buf); err != nil {
			return rtt{}, fmt.Errorf("keystrokes via %s: %w", t.name, err)
		}
	}
	samples := make([]float64, 0, e.cfg.Keystrokes)
	for i := range e.cfg.Keystrokes {
		k := byte('a' + i%26)
		start := time.Now()
		if _, err := in.Write([]byte{k}); err != nil {
			return rtt{}, err
		}
		for buf[0] != k {
			if _, err := io.ReadFull(out, buf); err != nil {
				return rtt{}, fmt.Errorf("keystrokes via %s: %w", t.name, err)
			}
		}
		samples = append(samples, float64(time.Since(start).Microseconds()))
		buf[0] = 0
	}
	slices.Sort(samples)
	return rtt{p50: samples[len(samples)/2], p99: samples[len(samples)*99/100]}, nil
}

// idleMemory opens Sessions connections, each with one open session
// channel, and returns the growth of pid's process tree's PSS per session.
func (e *sshEnv) idleMemory(ctx context.Context, t target, pid int) (float64, error) {
	if pid == 0 {
		return 0, nil
	}
	before := treePss(pid)
	var mu sync.Mutex
	var clients []*ssh.Client
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16) // a burst, not a stampede: sshd's MaxStartups is 256
	for range e.cfg.Sessions {
		g.Go(func() error {
			c, err := dial(gctx, t)
			if err != nil {
				return err
			}
			mu.Lock()
			clients = append(clients, c)
			mu.Unlock()
			// An open session channel with no command: what an idle
			// editor connection holds, without a login shell per session
			// (this machine's shell start-up files cost a second of CPU
			// each, which would measure bash, not SSH).
			_, err = c.NewSession()
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return 0, fmt.Errorf("open %d sessions via %s: %w", e.cfg.Sessions, t.name, err)
	}
	time.Sleep(2 * time.Second) // let every session settle into idle
	after := treePss(pid)
	if after <= before {
		if e.cfg.Sessions >= 100 {
			return 0, errors.New("memory did not grow with sessions; the measurement is broken")
		}
		return 0, nil // a handful of sessions can fit in pages already mapped
	}
	return float64(after-before) / float64(e.cfg.Sessions), nil
}
