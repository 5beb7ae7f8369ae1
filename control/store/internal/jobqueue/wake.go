package jobqueue

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/riverqueue/river/riverdriver"
)

// Wake tells a working client of this process that jobs were committed,
// for a database without LISTEN/NOTIFY (SQLite). River wakes its producer
// on an insert only for a non-transactional insert by the working client
// itself; ours are inserted in the transaction of the state change that
// implies them (a create's provisioning, a delete's teardown), so without
// this each job waited for the next fetch poll: 200 ms polls made
// create→ready about 200 ms where the provider's work is 5 ms.
//
// The store calls Nudge after the commit of a transaction that enqueued
// a job; the Runner's client hears it as River's own insert notification
// (see wakeDriver), and its producers fetch at once (within FetchCooldown).
// The poll stays as the backup for jobs another process inserted (`sbx
// admin`) and for scheduled jobs coming due. The zero value is ready.
type Wake struct {
	once sync.Once
	ch   chan struct{}
}

func (w *Wake) c() chan struct{} {
	w.once.Do(func() { w.ch = make(chan struct{}, 1) })
	return w.ch
}

// Nudge signals committed jobs. It never blocks: nudges coalesce while
// the client has not yet taken the last one, as one fetch takes every
// job available. A nil Wake ignores it.
func (w *Wake) Nudge() {
	if w == nil {
		return
	}
	select {
	case w.c() <- struct{}{}:
	default:
	}
}

// insertTopic is River's notifier topic for job inserts
// (notifier.NotificationTopicInsert, internal to River); its producers
// fetch when they hear {"queue": name} on it for their own queue.
const insertTopic = "river_insert"

// wakeDriver is a River driver that offers River a listener, and so turns
// on River's notifier, for a database that has none: the listener hears
// only this process's Wake. With a notifier River no longer polls the
// queue settings (pause/resume from another process, which sbx never
// does) nor wakes on its own non-transactional inserts (ours are all
// transactional); the fetch poll and the leader election poll stay.
type wakeDriver[TTx any] struct {
	riverdriver.Driver[TTx]
	wake   *Wake
	queues []string
}

// SupportsListener implements riverdriver.Driver.
func (d wakeDriver[TTx]) SupportsListener() bool { return true }

// GetListener implements riverdriver.Driver.
func (d wakeDriver[TTx]) GetListener(params *riverdriver.GetListenenerParams) riverdriver.Listener {
	schema := ""
	if params != nil {
		schema = params.Schema
	}
	return &wakeListener{wake: d.wake, queues: slices.Clone(d.queues), schema: schema}
}

// wakeListener turns each nudge into one insert notification per queue
// the client works. River's notifier calls WaitForNotification from one
// goroutine at a time; mu guards pending against a Close meanwhile.
type wakeListener struct {
	wake   *Wake
	queues []string
	schema string

	mu      sync.Mutex
	pending []string
}

func (l *wakeListener) Close(context.Context) error          { return nil }
func (l *wakeListener) Connect(context.Context) error        { return nil }
func (l *wakeListener) Listen(context.Context, string) error { return nil }
func (l *wakeListener) Ping(context.Context) error           { return nil }
func (l *wakeListener) Schema() string                       { return l.schema }
func (l *wakeListener) SetAfterConnectExec(string)           {}
func (l *wakeListener) Unlisten(context.Context, string) error {
	return nil
}

// WaitForNotification returns the next queue's insert notification of
// the last nudge, waiting for a nudge when none is left. A cancelled ctx
// returns its error, which River's notifier expects to interrupt it.
func (l *wakeListener) WaitForNotification(ctx context.Context) (*riverdriver.Notification, error) {
	l.mu.Lock()
	empty := len(l.pending) == 0
	l.mu.Unlock()
	if empty {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-l.wake.c():
		}
		l.mu.Lock()
		l.pending = append(l.pending, l.queues...)
		l.mu.Unlock()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.pending) == 0 {
		return nil, fmt.Errorf("job queue wake: no queue to notify")
	}
	q := l.pending[0]
	l.pending = l.pending[1:]
	return &riverdriver.Notification{Topic: insertTopic, Payload: fmt.Sprintf(`{"queue":%q}`, q)}, nil
}
