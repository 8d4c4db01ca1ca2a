// Package lineout is the buffered output of the commands' -stats-out and
// -spans-out: whole lines, written in large blocks, that still reach the
// file within a second of being written, so `tail -f` and a reader polling
// the file see a long-running server's output as it happens.
//
// The callers are the goroutines that finish requests and end spans, so a
// Write never waits for the file: one goroutine of the Writer's own does
// the writing, and a reader that stops reading (a full pipe, a FIFO nobody
// drains, a hung network disk) costs lines, dropped and counted, never a
// blocked request, engine or shutdown.
package lineout

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"
)

// FlushDelay is the longest a written line waits in the buffer.
const FlushDelay = time.Second

// MaxPending bounds the bytes waiting for the file; past it, lines are
// dropped (Dropped) until the file takes what waits.
const MaxPending = 8 << 20

// ErrClosed is what a Write after Close returns.
var ErrClosed = errors.New("lineout: closed")

// Writer buffers lines for w and has its goroutine write them at most
// FlushDelay after the first unwritten one (at once when half the pending
// bound is used, or for every line with a negative delay). Its zero value
// is not usable; create it with New and end it with Close. A Writer is safe
// for concurrent use; each Write is one whole line or more, kept whole.
type Writer struct {
	mu      sync.Mutex
	buf     []byte // lines not yet taken by the goroutine
	closed  bool
	err     error // the first error writing to w
	dropped int64
	patient context.Context // WaitWhenFull's: while live, a full Write waits
	taken   chan struct{}   // closed when the goroutine takes buf; nil until a Write waits

	out   io.Writer
	c     io.Closer
	delay time.Duration
	max   int

	kick  chan struct{}      // cap 1: lines wait
	hurry chan struct{}      // cap 1: write them now
	flush chan chan struct{} // Flush: write now, then close the one sent
	stop  chan struct{}      // closed by Close
	done  chan struct{}      // closed when the goroutine has written the last lines
	once  sync.Once
}

// New writes to w; Close closes w too when closer is set and w is an
// io.Closer. delay 0 means FlushDelay; negative, write every line at once.
func New(w io.Writer, closer bool, delay time.Duration) *Writer {
	if delay == 0 {
		delay = FlushDelay
	}
	lw := &Writer{out: w, delay: delay, max: MaxPending, kick: make(chan struct{}, 1),
		hurry: make(chan struct{}, 1), flush: make(chan chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	if c, ok := w.(io.Closer); ok && closer {
		lw.c = c
	}
	go lw.run()
	return lw
}

// Write queues p for the file. It returns the first error met writing to
// w, then refuses everything; a line that does not fit the pending bound is
// dropped and counted (nil error: the caller has nothing to do about it).
func (lw *Writer) Write(p []byte) (int, error) {
	lw.mu.Lock()
	switch {
	case lw.err != nil:
		err := lw.err
		lw.mu.Unlock()
		return 0, err
	case lw.closed:
		lw.mu.Unlock()
		return 0, ErrClosed
	case len(lw.buf)+len(p) > lw.max:
		if lw.patient == nil || lw.patient.Err() != nil || len(p) > lw.max {
			lw.dropped++
			lw.mu.Unlock()
			return len(p), nil
		}
		return lw.waitForRoom(p)
	}
	lw.buf = append(lw.buf, p...)
	urgent := lw.delay < 0 || len(lw.buf) > lw.max/2
	lw.mu.Unlock()
	signal(lw.kick)
	if urgent {
		signal(lw.hurry)
	}
	return len(p), nil
}

// waitForRoom, entered holding mu with a live patient context, has the
// goroutine write what waits now and writes p once it fits, or drops it
// when the context ends first.
func (lw *Writer) waitForRoom(p []byte) (int, error) {
	ctx := lw.patient
	if lw.taken == nil {
		lw.taken = make(chan struct{})
	}
	taken := lw.taken
	lw.mu.Unlock()
	signal(lw.kick)
	signal(lw.hurry)
	select {
	case <-taken:
	case <-lw.done:
	case <-ctx.Done():
	}
	return lw.Write(p)
}

// WaitWhenFull makes a Write that does not fit the pending bound wait for
// the file instead of dropping the line, until ctx ends. It is for a
// command's exit, once no engine or request waits on the writer: the
// requests still in flight all end at once, and a burst of their lines
// that a second's flushing would have spread out is kept, not dropped.
func (lw *Writer) WaitWhenFull(ctx context.Context) {
	lw.mu.Lock()
	lw.patient = ctx
	lw.mu.Unlock()
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// run writes what waits, a delay after the first line, until Close.
func (lw *Writer) run() {
	defer close(lw.done)
	var block []byte
	for {
		var acks []chan struct{}
		select {
		case <-lw.kick:
			acks = lw.wait(acks)
		case a := <-lw.flush:
			acks = append(acks, a)
		case <-lw.stop:
		}
		lw.mu.Lock()
		block, lw.buf = lw.buf, block[:0]
		closed := lw.closed
		if lw.taken != nil {
			close(lw.taken)
			lw.taken = nil
		}
		lw.mu.Unlock()
		if len(block) > 0 {
			if _, err := lw.out.Write(block); err != nil {
				lw.mu.Lock()
				if lw.err == nil {
					lw.err = err
				}
				lw.mu.Unlock()
			}
		}
		for _, a := range acks {
			close(a)
		}
		if closed {
			// Close refuses Writes before it stops us: nothing can
			// follow the block just written.
			return
		}
	}
}

// wait lets the first line's delay pass, unless something asks for the
// lines sooner.
func (lw *Writer) wait(acks []chan struct{}) []chan struct{} {
	if lw.delay < 0 {
		return acks
	}
	t := time.NewTimer(lw.delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-lw.hurry:
	case a := <-lw.flush:
		acks = append(acks, a)
	case <-lw.stop:
	}
	return acks
}

// Flush has the goroutine write what waits now and waits for it, or for
// ctx. It returns the first error met writing to w.
func (lw *Writer) Flush(ctx context.Context) error {
	a := make(chan struct{})
	select {
	case lw.flush <- a:
		select {
		case <-a:
		case <-lw.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	case <-lw.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.err
}

// Dropped is how many lines did not fit the pending bound.
func (lw *Writer) Dropped() int64 {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.dropped
}

// Close refuses further Writes, waits until the goroutine has written what
// waits or ctx is done, and closes w when New was told to. It returns the
// first error met, ctx's when the file did not take the last lines in time.
func (lw *Writer) Close(ctx context.Context) error {
	lw.once.Do(func() {
		lw.mu.Lock()
		lw.closed = true
		lw.mu.Unlock()
		close(lw.stop)
	})
	select {
	case <-lw.done:
	case <-ctx.Done():
		// The file is stuck; the goroutine ends when it is not.
		return ctx.Err()
	}
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.c != nil {
		if err := lw.c.Close(); err != nil && lw.err == nil {
			lw.err = err
		}
		lw.c = nil
	}
	return lw.err
}
