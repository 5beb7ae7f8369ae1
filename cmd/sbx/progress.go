package main

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// progress shows one status line on stderr while something slow runs. It
// draws only on a terminal and only once the wait passes a second, so
// quick commands and scripts (stderr to a file or a pipe) see nothing.
// Stop must be called; it waits for the drawing goroutine.
type progress struct {
	w       io.Writer
	start   time.Time
	mu      sync.Mutex // guards msg and drawn
	msg     string
	drawn   bool
	tty     bool
	stop    chan struct{}
	done    chan struct{}
	stopped sync.Once
}

// showAfter is how long a wait runs before progress is drawn.
const showAfter = time.Second

func (a *app) newProgress(msg string) *progress {
	p := &progress{w: a.errw, start: time.Now(), msg: msg, stop: make(chan struct{}), done: make(chan struct{})}
	if !isTerminal(a.errw) {
		close(p.done)
		return p
	}
	p.tty = true
	go p.run()
	return p
}

func (p *progress) run() {
	defer close(p.done)
	first := time.NewTimer(showAfter)
	defer first.Stop()
	select {
	case <-p.stop:
		return
	case <-first.C:
	}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		p.draw()
		select {
		case <-p.stop:
			return
		case <-tick.C:
		}
	}
}

func (p *progress) draw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	// \r and "erase line": the status line is redrawn in place.
	fmt.Fprintf(p.w, "\r\033[K%s (%ds)", p.msg, int(time.Since(p.start).Seconds()))
	p.drawn = true
}

// set changes the status text.
func (p *progress) set(format string, args ...any) {
	p.mu.Lock()
	p.msg = fmt.Sprintf(format, args...)
	p.mu.Unlock()
}

// Stop ends the display; final, if not empty, replaces the status line
// (on a terminal, even when the wait was too short to draw one).
func (p *progress) Stop(final string) {
	p.stopped.Do(func() { close(p.stop) })
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drawn {
		fmt.Fprint(p.w, "\r\033[K")
	}
	if final != "" && p.tty {
		fmt.Fprintf(p.w, "%s (%.1fs)\n", final, time.Since(p.start).Seconds())
	}
	p.drawn = false
}

// countingReader reports bytes read and the rate to a progress line.
type countingReader struct {
	r     io.Reader
	p     *progress
	label string
	total int64 // -1 when unknown
	n     int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	rate := float64(c.n) / max(time.Since(c.p.start).Seconds(), 0.001)
	if c.total > 0 {
		c.p.set("%s %s of %s, %s/s", c.label, sizeString(c.n), sizeString(c.total), sizeString(int64(rate)))
	} else {
		c.p.set("%s %s, %s/s", c.label, sizeString(c.n), sizeString(int64(rate)))
	}
	return n, err
}
