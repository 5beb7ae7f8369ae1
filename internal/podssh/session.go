package podssh

import (
	"context"
	"errors"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// sessionProbeInterval is how long openSession waits for a channel before
// asking whether the connection is still alive.
const sessionProbeInterval = 500 * time.Millisecond

var errConnDead = errors.New("connection closed while the session was opening")

// openSession opens a session on client, giving up when ctx ends or the
// connection turns out to be dead.
//
// client.NewSession alone can block forever: x/crypto/ssh registers the new
// channel after the connection's read loop has already closed every channel
// it knew (a connection closing as the open is sent), and nothing closes the
// late one. A caller stuck there holds a request forever, so the open runs
// aside and is abandoned when a keepalive says the connection is gone.
func openSession(ctx context.Context, client *ssh.Client) (*ssh.Session, error) {
	return OpenAside(ctx, client, client.NewSession, func(s *ssh.Session) { s.Close() })
}

// OpenAside runs open (something that opens a channel on client, which
// can hang as openSession says) in its own goroutine and waits for it,
// ctx, or the connection's death. An abandoned open that returns later
// has its result discarded.
func OpenAside[T any](ctx context.Context, client *ssh.Client, open func() (T, error), discard func(T)) (T, error) {
	type opened struct {
		v   T
		err error
	}
	res := make(chan opened, 1) // buffered: the open never waits to hand over
	var (
		mu        sync.Mutex
		abandoned bool
	)
	go func() {
		v, err := open()
		mu.Lock()
		defer mu.Unlock()
		if abandoned {
			if err == nil {
				discard(v)
			}
			return
		}
		res <- opened{v, err}
	}()
	giveUp := func(err error) (T, error) {
		mu.Lock()
		abandoned = true
		// The open may have handed over while we decided; keep nothing.
		select {
		case r := <-res:
			if r.err == nil {
				discard(r.v)
			}
		default:
		}
		mu.Unlock()
		var zero T
		return zero, err
	}
	tick := time.NewTicker(sessionProbeInterval)
	defer tick.Stop()
	for {
		select {
		case r := <-res:
			return r.v, r.err
		case <-ctx.Done():
			return giveUp(context.Cause(ctx))
		case <-tick.C:
			if !alive(ctx, client) {
				return giveUp(errConnDead)
			}
		}
	}
}

// alive reports whether client answers a keepalive. On a dead connection
// SendRequest returns at once (its reply channel is closed with the read
// loop); on a live one the probe is one round trip.
func alive(ctx context.Context, client *ssh.Client) bool {
	done := make(chan error, 1)
	go func() {
		_, _, err := client.SendRequest("keepalive@openssh.com", true, nil)
		done <- err
	}()
	select {
	case err := <-done:
		return err == nil
	case <-ctx.Done():
		return true // the caller's select sees ctx next
	case <-time.After(sessionProbeInterval):
		return true // slow, not dead: the pool's keepalive judges that
	}
}
