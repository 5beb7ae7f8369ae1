package sshbroker

import (
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/ssh"
)

// copyBufs holds one SSH packet's worth of payload: x/crypto/ssh never
// sends or delivers more than 32 KiB per read, so larger buffers only cost
// memory per idle channel.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// idleCopyBuf is what a copy loop holds while its direction is idle.
// Every channel pair has four copy loops parked in Read (x/crypto/ssh's
// channels only offer a blocking Read), so this is paid four times per
// idle session. A read that fills it moves the loop to a pooled full-size
// buffer, and a short read (the burst is over) hands that back, so only
// directions that are moving data hold one.
const idleCopyBuf = 512

// pipe relays one channel pair until both directions are done. cli is the
// client-side channel, up the sandbox-side one, whoever opened them;
// session says the pair is a session the client opened, the one kind that
// carries an exit status.
//
// Flow control is end to end: a copy goroutine blocks in Write while the
// receiving peer's window is shut, stops reading, and so stops returning
// window to the sender. Nothing is buffered beyond the SSH windows.
func (cc *clientConn) pipe(cli ssh.Channel, cliReqs <-chan *ssh.Request, up ssh.Channel, upReqs <-chan *ssh.Request, session bool) {
	var wg sync.WaitGroup
	// A session's EOF to the client waits for the sandbox's exit-status
	// (or the end of its channel). An OpenSSH client whose stdin is done
	// (every multiplexed command, any `ssh host cmd </dev/null`) closes the
	// channel as soon as it has the EOF, and x/crypto/ssh answers that
	// close at once, so an exit-status still on its way would find the
	// channel gone and the command would end with 255 and no status.
	// sshd never has this race: it holds its close until the command ended.
	var exited chan struct{}
	if session {
		exited = make(chan struct{})
	}
	upDrained, upDone := cc.half(&wg, up, cli, cc.b.m.bytesFromSandbox, cc.rec.AddOut, exited)
	cc.half(&wg, cli, up, cc.b.m.bytesToSandbox, cc.rec.AddIn, nil)
	cc.channelRequests(&wg, cli, cliReqs, up, upReqs, upDrained, upDone, exited)
	wg.Wait()
}

// channelRequests passes each side's channel requests to the other until
// both sides' request streams end. A request that waits (for the peer's
// reply, or for the output an exit status follows) runs in a goroutine of
// its own while its side's next requests wait, which keeps each side's
// requests in order; so an idle channel holds no goroutine for requests,
// where a blocking loop per side would hold two.
func (cc *clientConn) channelRequests(wg *sync.WaitGroup, cli ssh.Channel, cliReqs <-chan *ssh.Request, up ssh.Channel, upReqs <-chan *ssh.Request, upDrained, upDone <-chan struct{}, exited chan struct{}) {
	cliIn, upIn := cliReqs, upReqs
	cliOpen, upOpen := true, true
	// One request per side in flight: a send on these never blocks.
	cliFree, upFree := make(chan struct{}, 1), make(chan struct{}, 1)
	for cliOpen || upOpen {
		select {
		case r, ok := <-cliIn:
			if !ok {
				cliOpen, cliIn = false, nil
				// The client closed its channel: close ours upstream.
				up.Close()
				continue
			}
			if cc.forwardRequest(wg, r, up, nil, nil, true, cliFree) {
				cliIn = nil
			}
		case <-cliFree:
			cliIn = cliReqs
		case r, ok := <-upIn:
			if !ok {
				upOpen, upIn = false, nil
				// No exit status can follow the end of the sandbox's channel.
				release(exited)
				// The sandbox closed: deliver what it sent, then close.
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-upDone
					cli.Close()
				}()
				continue
			}
			if cc.forwardRequest(wg, r, cli, upDrained, exited, false, upFree) {
				upIn = nil
			}
		case <-upFree:
			upIn = upReqs
		}
	}
}

// release closes a hold that may be nil or already released. Only the
// sandbox's side of channelRequests calls it, one request at a time, so
// there is no race between checks.
func release(hold chan struct{}) {
	if hold == nil {
		return
	}
	select {
	case <-hold:
	default:
		close(hold)
	}
}

// half copies src's data and stderr to dst, then half-closes dst once hold
// (if not nil) is closed too. drained closes when both copies reached EOF,
// so exit-status is never passed on before the output it follows; done
// closes once dst is half-closed. Whichever copy finishes last does the
// close, so an idle session costs no waiter goroutine.
func (cc *clientConn) half(wg *sync.WaitGroup, src, dst ssh.Channel, bytes prometheus.Counter, logged func(int64), hold <-chan struct{}) (drained, done <-chan struct{}) {
	drainedc, donec := make(chan struct{}), make(chan struct{})
	var left atomic.Int32
	left.Store(2)
	finish := func() {
		if left.Add(-1) != 0 {
			return
		}
		close(drainedc)
		if hold != nil {
			<-hold
		}
		// EOF covers extended data too, so it waits for both copies.
		// eofMu: x/crypto/ssh sets the channel's sent-EOF flag without
		// a lock, and teardown may be writing a message to it.
		cc.eofMu.Lock()
		dst.CloseWrite()
		cc.eofMu.Unlock()
		close(donec)
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		defer finish()
		cc.copy(dst, src, bytes, logged)
	}()
	go func() {
		defer wg.Done()
		defer finish()
		cc.copy(dst.Stderr(), src.Stderr(), bytes, logged)
	}()
	return drainedc, donec
}

func (cc *clientConn) copy(dst io.Writer, src io.Reader, bytes prometheus.Counter, logged func(int64)) {
	idle := make([]byte, idleCopyBuf)
	buf := idle
	var pooled *[]byte
	defer func() {
		if pooled != nil {
			copyBufs.Put(pooled)
		}
	}()
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				// The receiver is gone; drain src so the sender's window
				// keeps moving until it notices the close.
				io.CopyBuffer(io.Discard, src, buf)
				return
			}
			bytes.Add(float64(n))
			logged(int64(n))
			cc.touch()
		}
		if rerr != nil {
			return
		}
		switch {
		case pooled == nil && n == len(buf):
			pooled = copyBufs.Get().(*[]byte)
			buf = *pooled
		case pooled != nil && n < idleCopyBuf:
			copyBufs.Put(pooled)
			pooled, buf = nil, idle
		}
	}
}

// touch marks the sandbox active, at most once per markEvery.
func (cc *clientConn) touch() {
	now := time.Now().UnixNano()
	last := cc.lastMark.Load()
	if now-last < int64(markEvery) || !cc.lastMark.CompareAndSwap(last, now) {
		return
	}
	cc.b.act.Mark(cc.sandboxID())
}

// forwardRequest passes one channel request on to dst. fromClient marks
// requests the client sends, which are filtered; the sandbox's are passed
// as is, an exit status only once srcDrained (all the output before it
// was passed on), and then releasing exited so the EOF may follow it.
// A request that waits is passed on in a goroutine that signals free when
// done, and busy says so.
func (cc *clientConn) forwardRequest(wg *sync.WaitGroup, r *ssh.Request, dst ssh.Channel, srcDrained <-chan struct{}, exited chan struct{}, fromClient bool, free chan<- struct{}) (busy bool) {
	exit := !fromClient && (r.Type == "exit-status" || r.Type == "exit-signal")
	if fromClient && r.Type == "x11-req" {
		// X11 would open channels back to the client carrying a display
		// cookie; not worth the surface.
		r.Reply(false, nil)
		return false
	}
	if fromClient {
		cc.logRequest(r)
	}
	if fromClient && r.Type == "auth-agent-req@openssh.com" {
		// OpenSSH sends it without want-reply, so the client's asking is
		// the only consent we can see; it arms agent channels for this
		// connection only.
		cc.agent.Store(true)
	}
	send := func() {
		if exit {
			<-srcDrained
		}
		ok, err := dst.SendRequest(r.Type, r.WantReply, r.Payload)
		if err != nil {
			ok = false
		}
		if exit {
			release(exited)
		}
		if r.WantReply {
			r.Reply(ok, nil)
		}
	}
	if !exit && !r.WantReply {
		send() // a write, no round trip
		return false
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		send()
		free <- struct{}{}
	}()
	return true
}
