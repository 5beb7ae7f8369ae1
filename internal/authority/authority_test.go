package authority

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// reg registers a connection with a context, as a surface does, and
// returns both.
func reg(r *Registry[string], epoch uint64, name string, exp time.Time, keys ...Key) (*Conn[string], context.Context, bool) {
	ctx, cancel := context.WithCancelCause(context.Background())
	c, raced := r.Register(epoch, Registration[string]{Keys: keys, Expires: exp, Value: name, End: cancel})
	return c, ctx, raced
}

func names(cs []*Conn[string]) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Value)
	}
	slices.Sort(out)
	return out
}

// TestExpiry runs on synctest's clock: each connection ends at its own
// expiry, with ErrExpired as its context's cause, not a moment before;
// one removed before its expiry, or without one, is never ended; and the
// connections share one timer rather than a goroutine each.
func TestExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New[string](nil)
		defer r.Close()
		start := time.Now()
		before := runtime.NumGoroutine()
		type live struct {
			c   *Conn[string]
			ctx context.Context
			at  time.Duration
		}
		var conns []live
		for i, at := range []time.Duration{3 * time.Second, time.Second, 2 * time.Second, 2 * time.Second} {
			c, ctx, _ := reg(r, r.Epoch(), string(rune('a'+i)), start.Add(at), Key{Token, "acct"})
			conns = append(conns, live{c, ctx, at})
		}
		removed, removedCtx, _ := reg(r, r.Epoch(), "removed", start.Add(time.Second), Key{Token, "acct"})
		r.Remove(removed)
		forever, foreverCtx, _ := reg(r, r.Epoch(), "forever", time.Time{}, Key{Token, "acct"})
		// Many more: still no goroutine until a timer fires.
		for range 1000 {
			c, _, _ := reg(r, r.Epoch(), "many", start.Add(time.Hour), Key{Sandbox, "sb"})
			defer r.Remove(c)
		}
		// NumGoroutine counts the whole process, where another test's
		// goroutines may still be ending: fewer is fine, more is not.
		if got := runtime.NumGoroutine(); got > before {
			t.Fatalf("goroutines after 1006 registrations: got %d, want at most %d (one timer, no goroutine per connection)", got, before)
		}

		for _, step := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second} {
			time.Sleep(step - time.Since(start) - time.Nanosecond)
			synctest.Wait()
			for _, l := range conns {
				if l.at >= step && l.ctx.Err() != nil {
					t.Fatalf("%s (expiry %v) ended at %v", l.c.Value, l.at, time.Since(start))
				}
			}
			time.Sleep(time.Nanosecond)
			synctest.Wait()
			for _, l := range conns {
				if l.at <= step {
					e, ok := Cause(l.ctx)
					if !ok || !errors.Is(e, ErrExpired) {
						t.Fatalf("%s (expiry %v) at %v: cause %v, want ErrExpired", l.c.Value, l.at, time.Since(start), context.Cause(l.ctx))
					}
				}
			}
		}
		if removedCtx.Err() != nil || removed.Cause() != nil {
			t.Fatalf("a connection removed before its expiry was ended: %v", context.Cause(removedCtx))
		}
		if foreverCtx.Err() != nil || forever.Cause() != nil {
			t.Fatalf("a connection without expiry was ended: %v", context.Cause(foreverCtx))
		}
		r.Remove(forever)
		for _, l := range conns {
			r.Remove(l.c)
		}
	})
}

// TestExpiredAtRegistration: a registration already past its expiry (a
// token that lapsed while the stream was being set up) ends at once.
func TestExpiredAtRegistration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New[string](nil)
		defer r.Close()
		c, ctx, _ := reg(r, r.Epoch(), "late", time.Now(), Key{Token, "a"})
		defer r.Remove(c)
		if e, ok := Cause(ctx); !ok || !errors.Is(e, ErrExpired) {
			t.Fatalf("cause %v, want ErrExpired", context.Cause(ctx))
		}
	})
}

// TestEpochRace: an invalidation that ran its check before a connection
// registered (and so could not find it) still reaches it, because its
// registration reports the race; one with no invalidation since its
// check does not.
func TestEpochRace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New[string](nil)
		defer r.Close()
		epoch := r.Epoch() // the surface reads it, then checks authority...
		checked := make(chan struct{})
		var found []*Conn[string]
		go func() { // ...while control revokes it, on another goroutine
			found = r.Invalidate(Key{Sandbox, "sb"})
			close(checked)
		}()
		synctest.Wait()
		<-checked
		if len(found) != 0 {
			t.Fatalf("invalidation found %v before any registration", names(found))
		}
		c, _, raced := reg(r, epoch, "late", time.Time{}, Key{Sandbox, "sb"})
		defer r.Remove(c)
		if !raced {
			t.Fatal("registration after an invalidation since its epoch: raced = false, want true")
		}
		c2, _, raced := reg(r, r.Epoch(), "fresh", time.Time{}, Key{Sandbox, "sb"})
		defer r.Remove(c2)
		if raced {
			t.Fatal("registration with no invalidation since its epoch: raced = true, want false")
		}
	})
}

// TestMatch: keys select the connections riding on them; an empty ID
// selects a whole kind; ended connections are not returned; an
// unknown-kind invalidation returns everything live.
func TestMatch(t *testing.T) {
	r := New[string](nil)
	defer r.Close()
	ep := r.Epoch()
	a, _, _ := reg(r, ep, "a", time.Time{}, Key{Sandbox, "s1"}, Key{Token, "acct1"})
	b, _, _ := reg(r, ep, "b", time.Time{}, Key{Sandbox, "s2"}, Key{Token, "acct2"})
	c, _, _ := reg(r, ep, "c", time.Time{}, Key{Sandbox, "s1"}, Key{Member, "acct1"})
	d, _, _ := reg(r, ep, "d", time.Time{}, Key{Sandbox, "s1"})
	d.End(&Ended{Reason: ErrRevoked})
	for _, tc := range []struct {
		name string
		key  Key
		want []string
	}{
		{"sandbox", Key{Sandbox, "s1"}, []string{"a", "c"}},
		{"token of an account", Key{Token, "acct2"}, []string{"b"}},
		{"every token", Key{Token, ""}, []string{"a", "b"}},
		{"members", Key{Member, "acct1"}, []string{"c"}},
		{"nothing", Key{Port, "x"}, nil},
	} {
		if got := names(r.Match(tc.key)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: Match(%v) = %v, want %v", tc.name, tc.key, got, tc.want)
		}
	}
	before := r.Epoch()
	if got := names(r.InvalidateAll()); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("InvalidateAll = %v, want [a b c]", got)
	}
	if r.Epoch() == before {
		t.Error("InvalidateAll did not move the epoch")
	}
	for _, x := range []*Conn[string]{a, b, c, d, d} {
		r.Remove(x)
	}
	if n := r.Len(); n != 0 {
		t.Errorf("Len after removing all = %d, want 0", n)
	}
}

// TestEndOnce: only the first End counts, and its cause is kept.
func TestEndOnce(t *testing.T) {
	r := New[string](nil)
	defer r.Close()
	var calls []error
	c, _ := r.Register(r.Epoch(), Registration[string]{End: func(err error) { calls = append(calls, err) }})
	defer r.Remove(c)
	first := &Ended{Reason: ErrSandboxEnded, Detail: "deleted"}
	if !c.End(first) {
		t.Fatal("first End reported false")
	}
	if c.End(&Ended{Reason: ErrRevoked}) {
		t.Fatal("second End reported true")
	}
	if len(calls) != 1 || calls[0] != first || c.Cause() != first {
		t.Fatalf("End hook calls %v, cause %v; want one call with %v", calls, c.Cause(), first)
	}
	if !errors.Is(c.Cause(), ErrSandboxEnded) || c.Cause().Error() != "sandbox ended: deleted" {
		t.Fatalf("cause %q does not say why", c.Cause())
	}
}

// TestClose: after Close no connection expires, and the timer's
// callback is gone (goleak checks the package).
func TestClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New[string](nil)
		c, ctx, _ := reg(r, r.Epoch(), "a", time.Now().Add(time.Second), Key{Token, "a"})
		r.Close()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if ctx.Err() != nil {
			t.Fatalf("expired after Close: %v", context.Cause(ctx))
		}
		r.Remove(c)
	})
}
