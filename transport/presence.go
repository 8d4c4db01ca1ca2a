package transport

import (
	"sync"
	"time"

	"github.com/llmtrace/llmtrace/otelstats"
)

// HTTPPresence is how long a side that sent a POST /v1/updates body stays
// present after it. HTTP holds no connection, so "a producer of that side
// is connected" (SPEC §1) becomes "posted within this long": an HTTP
// producer that posts at least once a minute — a HELLO naming its side is
// enough — is present without a pause, as a connected one is.
const HTTPPresence = time.Minute

// httpPresence holds one SideConnected per side while HTTP producers of
// that side keep posting. Its zero value is ready; it is safe for
// concurrent use.
type httpPresence struct {
	mu    sync.Mutex
	sides [3]struct {
		release func()
		last    time.Time
		timer   *time.Timer
	}
	closed bool
}

// saw marks side as posted now.
func (p *httpPresence) saw(tr *otelstats.Tracker, side otelstats.Side) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	sd := &p.sides[side]
	sd.last = time.Now()
	if sd.release != nil {
		return // the timer, when it fires, looks at last
	}
	sd.release = tr.SideConnected(side)
	sd.timer = time.AfterFunc(HTTPPresence, func() { p.expire(side) })
}

// expire releases side when it has not posted for HTTPPresence, or waits
// again for the rest of the window.
func (p *httpPresence) expire(side otelstats.Side) {
	p.mu.Lock()
	defer p.mu.Unlock()
	sd := &p.sides[side]
	if sd.release == nil {
		return
	}
	if left := HTTPPresence - time.Since(sd.last); left > 0 && !p.closed {
		sd.timer.Reset(left)
		return
	}
	sd.release()
	sd.release, sd.timer = nil, nil
}

// close releases every side.
func (p *httpPresence) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for i := range p.sides {
		sd := &p.sides[i]
		if sd.timer != nil {
			sd.timer.Stop()
		}
		if sd.release != nil {
			sd.release()
		}
		sd.release, sd.timer = nil, nil
	}
}
