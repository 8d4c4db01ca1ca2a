package openaihttp

import (
	"sync"
	"time"
)

// A stream's writes are read in batches rather than one by one: reading an
// event as its write goes by, with the client, the upstream and the
// exporters running in between, costs ten to fifteen times what it costs
// among others (caches gone cold; BENCHMARKS.md, "The proxy beside
// httputil.ReverseProxy"), and holds the next chunk back that long. So a
// write is copied aside, with its time, and a batch is read — each event at
// its own write's time, as before — when the next write would not fit, or
// comes more than laterDelay after the batch's first, when the handler
// reports its input, and at the end. What the tracker sees is the same;
// it sees it up to laterDelay late (or, when a stream pauses, until it
// goes on or ends).
const (
	laterCap   = 4 << 10 // bytes set aside per stream: a short completion's events
	laterSegs  = 32      // writes set aside per stream
	laterDelay = 100 * time.Millisecond
)

// laterPool holds the buffers writes are set aside in.
var laterPool = sync.Pool{New: func() any { return new([laterCap]byte) }}

// laterWrites are a stream's writes not read yet. The zero value is empty.
type laterWrites struct {
	buf  *[laterCap]byte // from laterPool, charged to the hold; nil until needed
	n    int             // bytes in buf
	segs [laterSegs]laterSeg
	k    int // writes in segs
}

// laterSeg is one write set aside: its length and when it returned, after
// the request's arrival.
type laterSeg struct {
	off time.Duration
	n   int32
}

// readSSE reads a write of a stream that returned at at: set aside when it
// fits, else (a large write, or a budget spent) at once, after what waits.
func (ex *exchange) readSSE(p []byte, at time.Time) {
	l := &ex.later
	if l.k > 0 && (l.n+len(p) > laterCap || l.k == laterSegs || at.Sub(ex.arrived)-l.segs[0].off > laterDelay) {
		ex.readLater()
	}
	if len(p) <= laterCap-l.n && l.ready(ex.hold) {
		copy(l.buf[l.n:], p)
		l.segs[l.k] = laterSeg{off: at.Sub(ex.arrived), n: int32(len(p))}
		l.n += len(p)
		l.k++
		return
	}
	ex.at = at
	ex.sse.feed(p, ex)
}

// readLater reads the writes set aside, in order, each at its time.
func (ex *exchange) readLater() {
	l := &ex.later
	off := 0
	for i := range l.k {
		s := l.segs[i]
		ex.at = ex.arrived.Add(s.off)
		ex.sse.feed(l.buf[off:off+int(s.n)], ex)
		off += int(s.n)
	}
	l.n, l.k = 0, 0
}

// ready makes sure l has its buffer, taking it from the pool and the hold;
// a budget that cannot spare it is no loss (the write is read at once),
// and so not counted.
func (l *laterWrites) ready(h *hold) bool {
	if l.buf != nil {
		return true
	}
	if !h.tryTake(laterCap) {
		return false
	}
	l.buf = laterPool.Get().(*[laterCap]byte)
	return true
}

// release gives the buffer back, once what it held has been read.
func (l *laterWrites) release(h *hold) {
	if l.buf == nil {
		return
	}
	laterPool.Put(l.buf)
	l.buf, l.n, l.k = nil, 0, 0
	h.release(laterCap)
}
