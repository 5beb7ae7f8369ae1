package sshbroker

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/crypto/ssh"
)

// probedConn is an ssh.Conn whose peer answers keepalives, or goes
// silent (SendRequest blocks until the connection is closed).
type probedConn struct {
	ssh.Conn
	silent atomic.Bool
	probes atomic.Int32
	closed chan struct{}
}

func (c *probedConn) SendRequest(name string, wantReply bool, _ []byte) (bool, []byte, error) {
	c.probes.Add(1)
	if c.silent.Load() {
		<-c.closed
		return false, nil, errors.New("connection closed")
	}
	return true, nil, nil
}

// TestKeepaliveClock runs the keepalive probes on synctest's fake clock,
// so the intervals are exact and the test waits for nothing: a peer that
// answers is probed once an interval and kept; one that goes silent is
// cut after exactly countMax intervals, with a cause naming its leg; and
// once the connection ends no probe stays scheduled.
func TestKeepaliveClock(t *testing.T) {
	for _, leg := range []string{"client", "sandbox"} {
		t.Run(leg, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancelCause(t.Context())
				cc := &clientConn{ctx: ctx, cancel: cancel}
				conn := &probedConn{closed: make(chan struct{})}
				context.AfterFunc(ctx, func() { close(conn.closed) })
				const interval, countMax = 15 * time.Second, 3
				cc.keepalive(aliveLeg{name: leg, conn: conn, interval: interval, countMax: countMax})

				time.Sleep(10*interval + time.Second)
				synctest.Wait()
				if n := conn.probes.Load(); n != 10 || ctx.Err() != nil {
					t.Fatalf("answering peer after 10 intervals: %d probes, ctx %v; want 10 and alive", n, context.Cause(ctx))
				}

				conn.silent.Store(true)
				silentFrom := time.Now()
				time.Sleep(interval) // the next probe goes unanswered
				synctest.Wait()
				if ctx.Err() != nil {
					t.Fatalf("cut one interval into silence: %v", context.Cause(ctx))
				}
				<-ctx.Done()
				// The probe went out at silentFrom+~1s (the next tick);
				// the watchdog cuts countMax intervals after it.
				if got := time.Since(silentFrom); got > interval*countMax+interval || got < interval*countMax {
					t.Fatalf("silent peer cut after %v, want countMax intervals (%v) after its last probe", got, interval*countMax)
				}
				cause := context.Cause(ctx)
				if !errors.Is(cause, errKeepalive) || !strings.Contains(cause.Error(), leg) {
					t.Fatalf("cause %v, want errKeepalive naming %s", cause, leg)
				}
				if leg == "sandbox" {
					var k kick
					if !errors.As(cause, &k) {
						t.Fatalf("sandbox leg cause %v carries no message for the client", cause)
					}
				}
				// Nothing stays scheduled: the relay's Wait returns.
				cc.wg.Wait()
				probes := conn.probes.Load()
				time.Sleep(10 * interval)
				synctest.Wait()
				if conn.probes.Load() != probes {
					t.Fatalf("probes after the connection ended: %d, then %d", probes, conn.probes.Load())
				}
			})
		})
	}
}
