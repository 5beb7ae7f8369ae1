package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// scaleConfig bounds the scale scenario. The defaults are a smoke run
// (a couple of minutes); the sizes are
//
//	go run ./loadtest scale --sandboxes 10000 --sessions 1000,5000,10000 --websockets 10000 --duration 60s
type scaleConfig struct {
	Sandboxes   int
	Sessions    []int
	WebSockets  int
	KeepAlive   int           // preview keep-alive connections held at once
	Duration    time.Duration // the create run
	CreateConns int
	Accounts    int           // creators round-robin over this many accounts
	Traffic     time.Duration // the Redis window, keystrokes on every session
	PrevConns   int
	PrevDur     time.Duration
	PrevRounds  int
	Timeout     time.Duration
	AdminURL    string
	RedisServer string
	BinDir      string
	FleetBase   string
	Only        []string // steps to run, in the usual order; empty is all
}

// edgeConnsPerSandbox is the broker's default MaxConnsPerSandbox.
const edgeConnsPerSandbox = 128

// scaleSteps are the steps' names for --only, in the order they run.
var scaleSteps = []string{"creates", "keepalive", "websockets", "sessions", "private"}

func (c *scaleConfig) Validate() error {
	var errs []error
	if c.Sandboxes < 1 || c.Sandboxes > 12000 {
		errs = append(errs, errors.New("--sandboxes must be 1..12000"))
	}
	last := 0
	for _, n := range c.Sessions {
		if n <= last || n > 12000 {
			errs = append(errs, errors.New("--sessions must rise and stay at most 12000 (spread round the sandboxes)"))
			break
		}
		last = n
	}
	if len(c.Sessions) > 0 && c.Sessions[len(c.Sessions)-1] > edgeConnsPerSandbox*c.Sandboxes {
		// The broker refuses the 129th with "unable to authenticate"
		// (a run at 9,500 over 40 sandboxes held 5,120).
		errs = append(errs, fmt.Errorf("--sessions: the edge holds at most %d connections to one sandbox; %d sandboxes hold %d",
			edgeConnsPerSandbox, c.Sandboxes, edgeConnsPerSandbox*c.Sandboxes))
	}
	if c.WebSockets < 0 || c.WebSockets > 12000 || c.KeepAlive < 0 || c.KeepAlive > 12000 {
		errs = append(errs, errors.New("--websockets and --keepalive must be 0..12000"))
	}
	if c.Duration <= 0 || c.Duration > 5*time.Minute || c.Traffic <= 0 || c.Traffic > time.Minute ||
		c.PrevDur <= 0 || c.PrevDur > time.Minute {
		errs = append(errs, errors.New("--duration must be (0, 5m], --traffic and --preview-duration (0, 1m]"))
	}
	if c.CreateConns < 1 || c.CreateConns > 256 || c.PrevConns < 1 || c.PrevConns > 1024 || c.PrevRounds < 1 || c.PrevRounds > 10 {
		errs = append(errs, errors.New("--create-conns must be 1..256, --preview-conns 1..1024, --preview-rounds 1..10"))
	}
	if c.Accounts < 1 || c.Accounts > 256 {
		errs = append(errs, errors.New("--accounts must be 1..256"))
	} else if c.Accounts > 1 && !slices.Equal(c.Only, []string{"creates"}) {
		// The later steps reach every sandbox with the first account's token.
		errs = append(errs, errors.New("--accounts above 1 needs --only creates"))
	}
	if c.Timeout <= 0 || c.Timeout > 2*time.Hour {
		errs = append(errs, errors.New("--timeout must be (0, 2h]"))
	}
	for _, o := range c.Only {
		if !slices.Contains(scaleSteps, o) {
			errs = append(errs, fmt.Errorf("--only: %q is not a step (steps: %s)", o, strings.Join(scaleSteps, ", ")))
		}
	}
	if c.BinDir == "" {
		errs = append(errs, errors.New("--bin-dir is required: a directory with control and edge built from this tree (go build -tags sbxlocal -o DIR/control ./cmd/control, which links the simulated fleet; go build -o DIR/edge ./cmd/edge)"))
	}
	return errors.Join(errs...)
}

// intList is a comma-separated list of counts.
type intList []int

func (l *intList) String() string {
	s := make([]string, len(*l))
	for i, n := range *l {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func (l *intList) Set(v string) error {
	*l = nil
	for f := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return err
		}
		*l = append(*l, n)
	}
	return nil
}

// scaleRow is one line of the table.
type scaleRow struct{ name, target, measured, verdict, note string }

const (
	pass     = "pass"
	miss     = "miss"
	noTarget = "—" // no target: a figure to read
)

func verdict(ok bool) string {
	if ok {
		return pass
	}
	return miss
}

// runScale starts the stack and measures the rows in order,
// printing the table at the end (and whatever rows it reached if a step
// fails).
func runScale(ctx context.Context, args []string) error {
	c := scaleConfig{Sessions: intList{100, 200}, Accounts: 1}
	fs := flag.NewFlagSet("loadtest scale", flag.ContinueOnError)
	fs.IntVar(&c.Sandboxes, "sandboxes", 200, "simulated sandboxes to create (the create run stops early when it reaches them)")
	fs.Var((*intList)(&c.Sessions), "sessions", "idle SSH sessions through the edge at which its memory is read, rising (one per sandbox)")
	fs.IntVar(&c.WebSockets, "websockets", 200, "WebSockets held through the edge's preview proxy")
	fs.IntVar(&c.KeepAlive, "keepalive", 0, "preview keep-alive connections held through the edge at once (0 skips the row)")
	fs.DurationVar(&c.Duration, "duration", 10*time.Second, "the create run's length (the issue's figure is 60s)")
	fs.IntVar(&c.CreateConns, "create-conns", 16, "concurrent create requests")
	fs.IntVar(&c.Accounts, "accounts", 1, "accounts the creators spread over, round-robin (a fleet's creates come from many tenants; above 1 needs --only creates)")
	fs.DurationVar(&c.Traffic, "traffic", 10*time.Second, "the Redis window: keystrokes on every held session")
	fs.IntVar(&c.PrevConns, "preview-conns", 64, "keep-alive connections of the private-preview runs")
	fs.DurationVar(&c.PrevDur, "preview-duration", 5*time.Second, "length of each private-preview run")
	fs.IntVar(&c.PrevRounds, "preview-rounds", 3, "rotated rounds of the private-preview runs (medians)")
	fs.DurationVar(&c.Timeout, "timeout", 30*time.Minute, "bound on the whole run")
	fs.StringVar(&c.AdminURL, "admin-url", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "a Postgres URL allowed to create and drop a scratch database")
	fs.StringVar(&c.RedisServer, "redis-server", "redis-server", "the redis-server binary (a private one is started on a free port)")
	fs.StringVar(&c.BinDir, "bin-dir", "", "directory holding control and edge binaries built from this tree")
	fs.Func("only", "comma-separated steps to run ("+strings.Join(scaleSteps, ", ")+"; creates always runs, the others need its sandboxes); empty runs all", func(v string) error {
		c.Only = strings.Split(v, ",")
		return nil
	})
	fs.StringVar(&c.FleetBase, "fleet-base", "127.90.0.1", "first loopback address of the simulated sandboxes")
	if err := parseConfig(fs, args, &c); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	if err := raiseFileLimit(); err != nil {
		return err
	}
	st := &scaleStack{}
	defer st.close()
	var rows []scaleRow
	defer func() { printScaleTable(os.Stdout, rows) }()
	if err := st.start(ctx, &c); err != nil {
		return err
	}
	r := &scaleRun{c: &c, st: st}
	// WebSockets before SSH sessions: the edge does not hand the
	// sessions' memory back to the kernel at once, so a later step's
	// PSS delta would come out short (or negative).
	steps := []func(context.Context) ([]scaleRow, error){r.creates, r.keepAlive, r.websockets, r.sessions, r.private}
	for i, step := range steps {
		if i > 0 && len(c.Only) > 0 && !slices.Contains(c.Only, scaleSteps[i]) {
			continue
		}
		got, err := step(ctx)
		rows = append(rows, got...)
		if err != nil {
			return err
		}
	}
	return nil
}

// raiseFileLimit lifts the soft descriptor limit to the hard one, which
// 10,000 sessions and sockets (each a client and the edge's end) need.
// The children inherit it.
func raiseFileLimit() error {
	const fileLimit = 200_000
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return err
	}
	old := l.Max
	// Root (a test machine) may raise the hard limit too, unless a
	// container keeps it from.
	if l.Max < fileLimit && os.Geteuid() == 0 {
		l.Max = fileLimit
	}
	l.Cur = l.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		l.Max = old
		l.Cur = old
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
			return fmt.Errorf("raise the descriptor limit: %w", err)
		}
	}
	if l.Cur < 65536 {
		// The broker holds two descriptors a session (client and
		// upstream) and the fleet three a sandbox in use (two listeners
		// and the session's upstream end).
		// Measured at 9,500: the edge held 19,038 descriptors for
		// SSH sessions and 19,049 for WebSockets, so 10,000 of either
		// need about 20,040 in the edge alone.
		fmt.Fprintf(os.Stderr, "loadtest scale: descriptor limit %d a process: the edge holds 2 a session or WebSocket and 1 a keep-alive preview connection; control's fleet 2 a sandbox plus 1 a session or 2 a WebSocket\n", l.Cur)
	}
	return nil
}

func printScaleTable(w io.Writer, rows []scaleRow) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "| row | target | measured | pass/miss | note |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", r.name, r.target, r.measured, r.verdict, r.note)
	}
}
