// Package lineout is the buffered output of the commands' -stats-out and
// -spans-out: whole lines, written in large blocks, that still reach the
// file within a second of being written, so `tail -f` and a reader polling
// the file see a long-running server's output as it happens.
package lineout

import (
	"bufio"
	"io"
	"sync"
	"time"
)

// FlushDelay is the longest a written line waits in the buffer.
const FlushDelay = time.Second

// Writer buffers lines for w and flushes them at most FlushDelay after
// the first unflushed one was written (or when the buffer fills). It
// starts no goroutine of its own: a timer armed by the first unflushed
// line flushes. Its zero value is not usable; create it with New. A Writer
// is safe for concurrent use; each Write is one whole line or more.
type Writer struct {
	mu      sync.Mutex
	w       *bufio.Writer
	c       io.Closer
	delay   time.Duration
	timer   *time.Timer
	pending bool
	closed  bool
	err     error
}

// New writes to w; Close closes w too when closer is set and w is an
// io.Closer. delay 0 means FlushDelay; negative, flush at every Write.
func New(w io.Writer, closer bool, delay time.Duration) *Writer {
	if delay == 0 {
		delay = FlushDelay
	}
	lw := &Writer{w: bufio.NewWriterSize(w, 64<<10), delay: delay}
	if c, ok := w.(io.Closer); ok && closer {
		lw.c = c
	}
	return lw
}

// Write buffers p. It returns the first error met writing to w, then
// refuses everything.
func (lw *Writer) Write(p []byte) (int, error) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.err != nil {
		return 0, lw.err
	}
	if lw.closed {
		return 0, io.ErrClosedPipe
	}
	n, err := lw.w.Write(p)
	if err != nil {
		lw.err = err
		return n, err
	}
	switch {
	case lw.delay < 0:
		lw.flushLocked()
	case !lw.pending && lw.w.Buffered() > 0:
		lw.pending = true
		if lw.timer == nil {
			lw.timer = time.AfterFunc(lw.delay, lw.timerFlush)
		} else {
			lw.timer.Reset(lw.delay)
		}
	}
	return n, lw.err
}

func (lw *Writer) timerFlush() {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	lw.pending = false
	if !lw.closed {
		lw.flushLocked()
	}
}

func (lw *Writer) flushLocked() {
	if err := lw.w.Flush(); err != nil && lw.err == nil {
		lw.err = err
	}
}

// Flush writes what is buffered now.
func (lw *Writer) Flush() error {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if !lw.closed {
		lw.flushLocked()
	}
	return lw.err
}

// Close flushes, stops the timer and closes w when New was told to. It
// returns the first error met.
func (lw *Writer) Close() error {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.closed {
		return lw.err
	}
	lw.flushLocked()
	lw.closed = true
	if lw.timer != nil {
		lw.timer.Stop()
	}
	if lw.c != nil {
		if err := lw.c.Close(); err != nil && lw.err == nil {
			lw.err = err
		}
	}
	return lw.err
}
