package preview

import (
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// closeGrace bounds two waits of a revoked WebSocket: for the upstream to
// finish the frame it is in the middle of (so the close frame does not
// land inside it), and for the client to read the close frame before the
// socket goes (closing with its reply unread would reset the connection
// and could discard the close frame on the client's side).
const closeGrace = time.Second

// wsConn is the client side of a relayed WebSocket, as ReverseProxy sees
// it after the hijack. It follows frame boundaries of what the upstream
// sends, so a close frame of ours can be put between two frames.
//
// mu guards frames, pending, revoked and lingering, and serialises
// writes: the ReverseProxy's upstream-to-client copy and revoke.
type wsConn struct {
	net.Conn
	mu        sync.Mutex
	frames    frameTracker
	pending   []byte // our close frame, waiting for the current frame's end
	revoked   bool   // no more upstream bytes reach the client
	lingering bool   // Close was called after revoke; the timer closes
	timer     *time.Timer
	// cancel ends the request the WebSocket rides on, which makes the
	// ReverseProxy close the upstream side; called once our close frame
	// is out (or given up on).
	cancel func()
	// done is told once the socket is really closed.
	done func()
	// upstreamEnded is asked, once, when the relay ends from the
	// upstream's side rather than the client's: a sandbox torn down
	// faster than its invalidation arrived still ends its WebSockets
	// with 1008 when its authority is gone (it revokes c if so).
	upstreamEnded func()
	checked       bool        // upstreamEnded was called
	clientDone    atomic.Bool // the client's side ended (read EOF or error)
}

// Read is the client-to-upstream direction; it notes the client's end.
func (c *wsConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil {
		c.clientDone.Store(true)
	}
	return n, err
}

// checkUpstreamEnd asks upstreamEnded once, unless the client ended first
// or the connection was revoked already.
func (c *wsConn) checkUpstreamEnd() {
	c.mu.Lock()
	run := !c.checked && !c.revoked && c.pending == nil && c.upstreamEnded != nil && !c.clientDone.Load()
	c.checked = true
	c.mu.Unlock()
	if run {
		c.upstreamEnded()
	}
}

// Write relays upstream bytes, up to the end of the current frame once a
// close is pending.
func (c *wsConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.revoked {
		return 0, net.ErrClosed
	}
	if c.pending == nil {
		c.frames.feed(b, false)
		return c.Conn.Write(b)
	}
	n := c.frames.feed(b, true)
	if _, err := c.Conn.Write(b[:n]); err != nil {
		return 0, err
	}
	if c.frames.atBoundary() {
		c.sendCloseLocked()
	}
	return n, net.ErrClosed
}

// revoke sends a close frame with code and reason at the next frame
// boundary, or drops the connection after closeGrace if the upstream
// never finishes its frame. It reports whether the close frame went out
// at once.
func (c *wsConn) revoke(code uint16, reason string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.revoked || c.pending != nil {
		return false
	}
	c.pending = closeFrame(code, reason)
	if c.frames.atBoundary() {
		c.sendCloseLocked()
		return true
	}
	c.timer = time.AfterFunc(closeGrace, func() { _ = c.forceClose() })
	return false
}

// sendCloseLocked writes the pending close frame and half-closes: the
// client reads the frame, then end of stream.
func (c *wsConn) sendCloseLocked() {
	c.revoked = true
	_ = c.Conn.SetWriteDeadline(time.Now().Add(closeGrace))
	_, _ = c.Conn.Write(c.pending)
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	if c.cancel != nil {
		c.cancel()
	}
}

// Close is the ReverseProxy's, once either direction ended. After a
// revoke the socket lingers up to closeGrace so the client's close reply
// is read (by the client-to-upstream copy, which is still reading) rather
// than answered with a reset.
func (c *wsConn) Close() error {
	c.checkUpstreamEnd()
	c.mu.Lock()
	if !c.revoked || c.lingering {
		c.mu.Unlock()
		return c.forceClose()
	}
	c.lingering = true
	if c.timer != nil {
		c.timer.Stop()
	}
	_ = c.Conn.SetReadDeadline(time.Now().Add(closeGrace))
	c.timer = time.AfterFunc(closeGrace, func() { _ = c.forceClose() })
	c.mu.Unlock()
	return nil
}

// forceClose closes the socket now; later calls do nothing.
func (c *wsConn) forceClose() error {
	c.mu.Lock()
	c.revoked, c.lingering = true, true
	if c.timer != nil {
		c.timer.Stop()
	}
	done := c.done
	c.done = nil
	cancel := c.cancel
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	err := c.Conn.Close()
	if done != nil {
		done()
	}
	return err
}

// CloseWrite passes the upstream's end of stream on, as the ReverseProxy
// does for a bare TCP connection.
func (c *wsConn) CloseWrite() error {
	c.checkUpstreamEnd()
	c.mu.Lock()
	revoked := c.revoked
	c.mu.Unlock()
	if revoked {
		return nil // sendCloseLocked half-closed already
	}
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// closeFrame is an unmasked (server to client) close frame; the reason
// is cut to fit a control frame's 125 bytes.
func closeFrame(code uint16, reason string) []byte {
	if len(reason) > 123 {
		reason = reason[:123]
	}
	f := make([]byte, 4, 4+len(reason))
	f[0] = 0x88 // FIN, opcode close
	f[1] = byte(2 + len(reason))
	binary.BigEndian.PutUint16(f[2:], code)
	return append(f, reason...)
}

// frameTracker follows RFC 6455 frame boundaries in a byte stream
// without buffering it: it reads each header (2 to 14 bytes) and counts
// the payload. Extensions such as permessage-deflate change payloads,
// not framing.
type frameTracker struct {
	hdr     [14]byte
	nh      int    // header bytes of the current frame seen so far
	payload uint64 // payload bytes of the current frame still to come
}

func (f *frameTracker) atBoundary() bool { return f.nh == 0 && f.payload == 0 }

// headerLen is the length of the header whose first two bytes are in
// hdr.
func (f *frameTracker) headerLen() int {
	n := 2
	switch f.hdr[1] & 0x7f {
	case 126:
		n += 2
	case 127:
		n += 8
	}
	if f.hdr[1]&0x80 != 0 {
		n += 4 // masking key
	}
	return n
}

// feed accounts for b and returns how many of its bytes it took: all of
// them, or with stop, only those up to the end of the frame in progress
// (none when at a boundary already).
func (f *frameTracker) feed(b []byte, stop bool) int {
	i := 0
	for i < len(b) {
		if stop && f.atBoundary() {
			return i
		}
		if f.payload > 0 {
			k := uint64(len(b) - i)
			if k > f.payload {
				k = f.payload
			}
			f.payload -= k
			i += int(k)
			continue
		}
		f.hdr[f.nh] = b[i]
		f.nh++
		i++
		if f.nh < 2 || f.nh < f.headerLen() {
			continue
		}
		switch l := f.hdr[1] & 0x7f; l {
		case 126:
			f.payload = uint64(binary.BigEndian.Uint16(f.hdr[2:4]))
		case 127:
			f.payload = binary.BigEndian.Uint64(f.hdr[2:10])
		default:
			f.payload = uint64(l)
		}
		f.nh = 0
	}
	return i
}
