package openaihttp

import (
	"sync"
	"sync/atomic"
)

// budget bounds the bytes of bodies a Handler or a Proxy holds at once,
// over all its requests: request bodies read ahead for the model, SSE
// events being assembled, fields kept from JSON responses. A buffer that
// would pass it is not grown; what it was for is given up (the model stays
// unknown, the event or field unread) and counted, and the request goes on
// untouched. Safe for concurrent use.
type budget struct {
	limit int64
	used  atomic.Int64
	// refused is called for each refusal (the llm.http.body_budget.refused
	// counter); nil when nobody counts.
	refused func()
}

func newBudget(limit int64, refused func()) *budget { return &budget{limit: limit, refused: refused} }

// hold is one request's share of a budget, given back when the request
// ends. A nil hold, or one without a budget, takes without limit. Safe for
// concurrent use: a proxied request body is read by the transport's
// goroutine while the response is read by the handler's. Growth is
// amortized (buffers double), so the lock is taken rarely.
type hold struct {
	b      *budget
	mu     sync.Mutex
	n      int64
	closed bool
}

// take reserves n more bytes, or reports false (and counts the refusal)
// when that would pass the budget or the request has ended.
func (h *hold) take(n int) bool { return h.reserve(n, true) }

// grow returns b with room for n more bytes, charged to h: its capacity
// doubles, to at least floor and at most limit (0: no limit), so a body
// read in small pieces costs a logarithmic number of copies. It returns b
// and false when the room would pass limit or the budget refuses it.
func (h *hold) grow(b []byte, n, floor, limit int) ([]byte, bool) {
	if len(b)+n <= cap(b) {
		return b, true
	}
	c := max(2*cap(b), len(b)+n, floor)
	if limit > 0 {
		c = min(c, limit)
	}
	if c < len(b)+n || !h.take(c-cap(b)) {
		return b, false
	}
	nb := make([]byte, len(b), c)
	copy(nb, b)
	return nb, true
}

// tryTake is take for bytes that only save work, from the budget's first
// half (the rest stays for what would be given up without it): a refusal
// gives nothing up, and is not counted.
func (h *hold) tryTake(n int) bool { return h.reserve(n, false) }

// reserve takes n bytes; count says a refusal is counted, and that the
// whole budget may be used.
func (h *hold) reserve(n int, count bool) bool {
	if h == nil || h.b == nil || n <= 0 {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	limit := h.b.limit
	if !count {
		limit /= 2
	}
	if h.b.used.Add(int64(n)) > limit {
		h.b.used.Add(-int64(n))
		if count && h.b.refused != nil {
			h.b.refused()
		}
		return false
	}
	h.n += int64(n)
	return true
}

// release gives n of the request's bytes back.
func (h *hold) release(n int) {
	if h == nil || h.b == nil || n <= 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	n = int(min(int64(n), h.n))
	h.n -= int64(n)
	h.b.used.Add(-int64(n))
}

// close gives back everything the request holds; it takes no more.
func (h *hold) close() {
	if h == nil || h.b == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.b.used.Add(-h.n)
	h.n, h.closed = 0, true
}
