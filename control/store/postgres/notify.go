package postgres

import (
	"context"
	"time"

	"github.com/sbxedge/sbx/internal/fanout"
)

// eventsChannel is the NOTIFY channel InsertEvent signals on; the payload
// is the sandbox ID.
const eventsChannel = "sbx_events"

// listener owns the LISTEN connection. It starts with the first
// subscription, so stores that never stream (the admin CLI, most tests)
// hold no extra connection, and stops in Close.
type listener struct {
	hub    fanout.Hub
	cancel context.CancelFunc
	done   chan struct{}
}

// SubscribeEvents implements store.Store with LISTEN/NOTIFY, so a stream
// served by one control replica sees events committed by any other.
func (s *Store) SubscribeEvents(sandboxID string) (<-chan struct{}, func()) {
	ch, cancel := s.listen.hub.Subscribe(sandboxID)
	s.listenOnce.Do(func() {
		ctx, stop := context.WithCancel(context.Background())
		s.listen.cancel, s.listen.done = stop, make(chan struct{})
		go s.runListener(ctx)
	})
	return ch, cancel
}

// runListener holds a dedicated connection in LISTEN and forwards each
// notification to the hub. After (re)connecting it signals every
// subscriber, because notifications sent while it was not listening are
// lost; subscribers re-read the store and so miss nothing.
func (s *Store) runListener(ctx context.Context) {
	defer close(s.listen.done)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := s.listenOnceConn(ctx, func() { backoff = 100 * time.Millisecond })
		if ctx.Err() != nil {
			return
		}
		s.logger.Warn("event listener lost its connection; reconnecting", "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (s *Store) listenOnceConn(ctx context.Context, listening func()) error {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// Taken out of the pool for good: a connection in LISTEN must not be
	// handed to other queries, and it is closed when this returns.
	conn := pc.Hijack()
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+eventsChannel); err != nil {
		return err
	}
	listening()
	s.listen.hub.NotifyAll()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		s.listen.hub.Notify(n.Payload)
	}
}

// stopListener stops the listener if it ever started and waits for it.
func (s *Store) stopListener() {
	s.listenOnce.Do(func() {}) // a later SubscribeEvents starts nothing
	if s.listen.cancel != nil {
		s.listen.cancel()
		<-s.listen.done
	}
}
