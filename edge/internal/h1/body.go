package h1

import (
	"errors"
	"io"
	"sync"
	"time"
)

// body is a request body of a declared length, read from the
// connection's buffer. A handler (or a transport it handed the body to)
// may still hold it after it returned: from then on it reads nothing.
type body struct {
	c      *conn
	mu     sync.Mutex // guards left and closed against a late reader
	left   int64
	closed bool
	failed bool // a read failed (the body timeout): nothing left to drain
}

var errBodyClosed = errors.New("h1: read on a closed request body")

func (b *body) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, errBodyClosed
	}
	if b.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.c.br.Read(p)
	b.left -= int64(n)
	if b.left == 0 {
		_ = b.c.nc.SetReadDeadline(time.Time{})
		b.mu.Unlock()
		b.c.watch.bodyDone()
		b.mu.Lock()
		return n, nil
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		b.failed = true
	}
	return n, err
}

// Close is the handler's; the connection still drains what is left.
func (b *body) Close() error { return nil }

func (b *body) done() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.left == 0
}

// drain reads what the handler left of the body, so that the next request
// starts where it should; false if that failed.
func (b *body) drain() bool {
	b.mu.Lock()
	left, failed := b.left, b.failed
	b.mu.Unlock()
	if left == 0 {
		return true
	}
	if failed {
		return false
	}
	if d := b.c.srv.srv.ReadHeaderTimeout; d > 0 {
		_ = b.c.nc.SetReadDeadline(time.Now().Add(d))
		b.c.deadline = true
	}
	n, err := b.c.br.Discard(int(left))
	b.mu.Lock()
	b.left -= int64(n)
	b.mu.Unlock()
	return err == nil
}

// close ends the body for its handler once the request is served.
func (b *body) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
}
