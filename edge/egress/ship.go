package egress

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Tee records each decision in every one of its Recorders.
type Tee []Recorder

// Record implements Recorder.
func (t Tee) Record(d Decision) {
	for _, r := range t {
		r.Record(d)
	}
}

// Shipper is a Recorder that sends decisions to control in batches, so
// the egress log and the refusals in a sandbox's events are the same on
// every edge replica. Record never blocks: when control is slower than
// the gateway's traffic for longer than the queue holds, decisions are
// dropped and counted in the log.
type Shipper struct {
	send     func(context.Context, []Decision) error
	batch    int
	interval time.Duration
	log      *slog.Logger

	ch chan Decision

	life sync.Mutex // guards stop and done: Start and Stop run on different goroutines
	stop context.CancelFunc
	done chan struct{}

	mu      sync.Mutex // guards dropped
	dropped int
}

// NewShipper ships decisions with send, at most batch at a time (default
// 100), at least every interval (default 500 ms) while there are any.
func NewShipper(send func(context.Context, []Decision) error, batch int, interval time.Duration, log *slog.Logger) *Shipper {
	if batch <= 0 {
		batch = 100
	}
	if interval <= 0 {
		interval = 500 * time.Millisecond
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Shipper{send: send, batch: batch, interval: interval, log: log, ch: make(chan Decision, 16*batch)}
}

var _ Recorder = (*Shipper)(nil)

// Record queues d for the next batch.
func (s *Shipper) Record(d Decision) {
	if d.SandboxID == "" {
		return
	}
	select {
	case s.ch <- d:
	default:
		s.mu.Lock()
		s.dropped++
		s.mu.Unlock()
	}
}

// Start runs the shipping loop until Stop.
func (s *Shipper) Start() {
	s.life.Lock()
	defer s.life.Unlock()
	if s.stop != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stop, s.done = cancel, make(chan struct{})
	go func() {
		defer close(s.done)
		s.run(ctx)
	}()
}

// Stop sends what is queued (bounded by ctx) and ends the loop.
func (s *Shipper) Stop(ctx context.Context) {
	s.life.Lock()
	stop, done := s.stop, s.done
	s.life.Unlock()
	if stop == nil {
		return
	}
	stop()
	<-done
	s.flush(ctx)
}

func (s *Shipper) run(ctx context.Context) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.flush(ctx)
		}
	}
}

// flush sends everything queued now, a batch at a time. A batch control
// did not take is dropped: the gateway keeps no backlog of its own.
func (s *Shipper) flush(ctx context.Context) {
	for {
		var b []Decision
	fill:
		for len(b) < s.batch {
			select {
			case d := <-s.ch:
				b = append(b, d)
			default:
				break fill
			}
		}
		if len(b) == 0 {
			break
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		err := s.send(sctx, b)
		cancel()
		if err != nil {
			s.log.Warn("egress: ship decisions to control", "decisions", len(b), "err", err)
			s.mu.Lock()
			s.dropped += len(b)
			s.mu.Unlock()
			break
		}
	}
	s.mu.Lock()
	n := s.dropped
	s.dropped = 0
	s.mu.Unlock()
	if n > 0 {
		s.log.Warn("egress: decisions dropped from the egress log", "decisions", n)
	}
}
