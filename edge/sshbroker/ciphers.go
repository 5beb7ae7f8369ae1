package sshbroker

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"slices"
	"strings"
	"time"
)

// SSH picks each direction's cipher as the first on the client's list
// that the server also offers (RFC 4253 7.1), so a server's preference
// order decides nothing. OpenSSH's client lists chacha20-poly1305 first,
// and in x/crypto/ssh that cipher runs as generic Go on amd64: about 40%
// of the broker's CPU in bulk transfers, where AES-GCM runs on AES-NI at
// a fraction of the cost. The broker therefore reads the client's
// KEXINIT before it sends its own (the client sends it right after the
// version exchange, not waiting for ours) and, when the client can do
// AES-GCM both ways, offers AES-GCM alone. A client that cannot (one that
// offers only chacha20-poly1305, or only CTR modes) is offered the
// default list and keeps its choice.

// gcmCiphers are offered alone to clients that support one of them.
var gcmCiphers = []string{"aes128-gcm@openssh.com", "aes256-gcm@openssh.com"}

// kexPeekWait bounds how long the broker waits for the client's KEXINIT
// before sending its own offer, for a client that waits for the
// server's first; such a client gets the default list.
const kexPeekWait = 2 * time.Second

// maxPeek bounds what the broker reads ahead: a version line (255 bytes
// at most, but servers tolerate lines before it) and one KEXINIT packet,
// which OpenSSH keeps far below this.
const maxPeek = 64 << 10

// peekedConn replays what was read ahead to x/crypto/ssh, and swallows
// its version line, which the broker already sent.
type peekedConn struct {
	net.Conn
	ahead   []byte
	version []byte // our version line, still to be swallowed
}

func (c *peekedConn) Read(p []byte) (int, error) {
	if len(c.ahead) > 0 {
		n := copy(p, c.ahead)
		c.ahead = c.ahead[n:]
		if len(c.ahead) == 0 {
			// An empty slice would still pin the peek buffer (4 KiB or
			// more) for the life of the connection.
			c.ahead = nil
		}
		return n, nil
	}
	return c.Conn.Read(p)
}

func (c *peekedConn) Write(p []byte) (int, error) {
	if len(c.version) > 0 {
		// x/crypto/ssh writes its version line in one Write, first.
		if !bytes.HasPrefix(p, c.version) {
			return 0, errors.New("sshbroker: unexpected first write before the version line")
		}
		rest := p[len(c.version):]
		c.version = nil
		if len(rest) == 0 {
			return len(p), nil
		}
		n, err := c.Conn.Write(rest)
		return n + len(p) - len(rest), err
	}
	return c.Conn.Write(p)
}

// chooseCiphers sends the version line, reads the client's version line
// and KEXINIT (bounded by kexPeekWait and deadline), and returns the
// connection to hand x/crypto/ssh with the ciphers to offer (nil: the
// default list). An error means the connection is unusable.
func chooseCiphers(nc net.Conn, version string, deadline time.Time) (net.Conn, []string, error) {
	line := []byte(version + "\r\n")
	if _, err := nc.Write(line); err != nil {
		return nil, nil, err
	}
	pc := &peekedConn{Conn: nc, version: line}
	peekUntil := time.Now().Add(kexPeekWait)
	if deadline.Before(peekUntil) {
		peekUntil = deadline
	}
	_ = nc.SetReadDeadline(peekUntil)
	defer nc.SetReadDeadline(deadline)
	buf := make([]byte, 0, 4<<10)
	for {
		if ciphers, done := clientCiphers(buf); done {
			pc.ahead = buf
			return pc, ciphers, nil
		}
		if len(buf) == cap(buf) {
			if cap(buf) >= maxPeek {
				pc.ahead = buf
				return pc, nil, nil
			}
			buf = slices.Grow(buf, cap(buf))
		}
		n, err := nc.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && time.Now().Before(deadline) {
				// A client waiting for our KEXINIT: offer the default.
				pc.ahead = buf
				return pc, nil, nil
			}
			return nil, nil, err
		}
	}
}

// clientCiphers parses the client's version line and KEXINIT from b.
// done is false while more bytes are needed; ciphers is gcmCiphers when
// the client offers AES-GCM in both directions, else nil.
func clientCiphers(b []byte) (ciphers []string, done bool) {
	// Lines up to and including the one starting "SSH-".
	for {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return nil, false
		}
		line := b[:i]
		b = b[i+1:]
		if bytes.HasPrefix(line, []byte("SSH-")) {
			break
		}
	}
	if len(b) < 5 {
		return nil, false
	}
	plen := binary.BigEndian.Uint32(b)
	if plen < 2 || plen > maxPeek {
		return nil, true // not a packet we understand: x/crypto will say
	}
	if uint32(len(b)-4) < plen {
		return nil, false
	}
	pad := uint32(b[4])
	if pad+1 > plen {
		return nil, true
	}
	payload := b[5 : 4+plen-pad]
	const msgKexInit = 20
	if len(payload) < 17 || payload[0] != msgKexInit {
		return nil, true
	}
	p := payload[17:]
	var lists [4]string // kex, host key, ciphers client to server, server to client
	for i := range lists {
		if len(p) < 4 {
			return nil, true
		}
		n := binary.BigEndian.Uint32(p)
		if uint32(len(p)-4) < n {
			return nil, true
		}
		lists[i], p = string(p[4:4+n]), p[4+n:]
	}
	if offersAny(lists[2], gcmCiphers) && offersAny(lists[3], gcmCiphers) {
		return gcmCiphers, true
	}
	return nil, true
}

func offersAny(list string, want []string) bool {
	for name := range strings.SplitSeq(list, ",") {
		if slices.Contains(want, name) {
			return true
		}
	}
	return false
}
