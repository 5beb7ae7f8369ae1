package connlog

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeSink records batches; fail makes the next calls fail.
type fakeSink struct {
	mu      sync.Mutex
	batches []Batch
	fail    bool
}

func (f *fakeSink) ReportConnections(_ context.Context, b Batch) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		return errors.New("control unreachable")
	}
	f.batches = append(f.batches, b)
	return nil
}

func (f *fakeSink) take() []Batch {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.batches
	f.batches = nil
	return b
}

func TestRecorderBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sink := &fakeSink{}
		reg := prometheus.NewRegistry()
		r, err := NewRecorder(RecorderConfig{Reporter: "edge-1", Sink: sink, Every: time.Second, Lease: 5 * time.Second,
			MaxBatch: 2, Source: "edge", Registry: reg})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); r.Run(ctx) }()

		a := r.Open(Record{SandboxID: "sb", Kind: KindSSH, ClientKind: ClientOpenSSH})
		b := r.Open(Record{SandboxID: "sb", Kind: KindSSH})
		c := r.Open(Record{SandboxID: "sb", Kind: KindPreview})
		if got := testutil.ToFloat64(r.live.WithLabelValues("ssh")); got != 2 {
			t.Fatalf("live ssh gauge %v, want 2", got)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		// Three opened records, at most two a call: two calls.
		got := sink.take()
		if len(got) != 2 || len(got[0].Records)+len(got[1].Records) != 3 || got[0].Reporter != "edge-1" || got[0].LeaseSeconds != 5 {
			t.Fatalf("first batches: %+v", got)
		}
		// Nothing changed: one empty batch, which renews the lease.
		time.Sleep(time.Second)
		synctest.Wait()
		if got := sink.take(); len(got) != 1 || len(got[0].Records) != 0 {
			t.Fatalf("idle interval: %+v, want one empty batch", got)
		}
		// Bytes, a channel and a client kind learned are sent; a record
		// that did not change is not.
		a.AddOut(10)
		b.AddChannel(ChannelSFTP)
		b.SetClient(ClientVSCode, "")
		time.Sleep(time.Second)
		synctest.Wait()
		got = sink.take()
		if len(got) != 1 || len(got[0].Records) != 2 {
			t.Fatalf("changes: %+v", got)
		}
		// Control away: the close is kept and sent once it answers.
		sink.mu.Lock()
		sink.fail = true
		sink.mu.Unlock()
		c.Close(EndClosed)
		c.Close("twice") // no effect
		time.Sleep(time.Second)
		synctest.Wait()
		sink.mu.Lock()
		sink.fail = false
		sink.mu.Unlock()
		time.Sleep(time.Second)
		synctest.Wait()
		got = sink.take()
		if len(got) != 1 || len(got[0].Records) != 1 || got[0].Records[0].EndReason != EndClosed || got[0].Records[0].EndedAt == nil {
			t.Fatalf("close after an outage: %+v", got)
		}
		// Shutdown ends what is open and says so.
		cancel()
		<-done
		got = sink.take()
		ended := 0
		for _, bt := range got {
			for _, rec := range bt.Records {
				if rec.EndReason == EndShutdown {
					ended++
				}
			}
		}
		if ended != 2 {
			t.Fatalf("shutdown batches %+v, want a and b ended", got)
		}
		if got := testutil.ToFloat64(r.live.WithLabelValues("ssh")); got != 0 {
			t.Fatalf("live ssh gauge %v after shutdown, want 0", got)
		}
	})
}

func TestNilRecorderRecordsNothing(t *testing.T) {
	var r *Recorder
	c := r.Open(Record{SandboxID: "sb", Kind: KindSSH})
	c.AddIn(1)
	c.AddOut(1)
	c.AddChannel(ChannelShell)
	c.SetClient(ClientSbx, "")
	c.Close(EndClosed)
	if c.ID() != "" || c.ClientKind() != "" {
		t.Fatal("a nil Conn has an ID or a kind")
	}
}
