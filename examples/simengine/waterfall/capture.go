// Package waterfall draws request traces as waterfalls — on a terminal and
// in a self-contained HTML page — from the very spans the TracerProvider
// exports, captured by an sdktrace.SpanProcessor.
package waterfall

import (
	"context"
	"sync"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Capture is an sdktrace.SpanProcessor that holds each trace's ended spans
// until Take claims them. A caller that knows when a request is complete
// (otelstats.WithOnFinish runs right after the request's spans ended) takes
// or drops its trace there, so Capture holds at most a few traces at a
// time; should nobody claim them, it keeps only the newest MaxPending
// traces.
type Capture struct {
	mu      sync.Mutex
	pending map[trace.TraceID][]sdktrace.ReadOnlySpan
	order   []trace.TraceID // arrival order of pending traces, for the bound
	max     int
	dropped int
}

var _ sdktrace.SpanProcessor = (*Capture)(nil)

// NewCapture returns a Capture that holds up to maxPending unclaimed traces.
func NewCapture(maxPending int) *Capture {
	return &Capture{pending: make(map[trace.TraceID][]sdktrace.ReadOnlySpan), max: max(maxPending, 1)}
}

// OnStart does nothing.
func (c *Capture) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd holds s under its trace id.
func (c *Capture) OnEnd(s sdktrace.ReadOnlySpan) {
	id := s.SpanContext().TraceID()
	c.mu.Lock()
	defer c.mu.Unlock()
	old, ok := c.pending[id]
	if !ok {
		c.order = append(c.order, id)
		for len(c.pending) >= c.max && len(c.order) > 1 {
			victim := c.order[0]
			c.order = c.order[1:]
			if _, live := c.pending[victim]; live {
				delete(c.pending, victim)
				c.dropped++
			}
		}
	}
	c.pending[id] = append(old, s)
	// Keep order from growing with ids already taken.
	if len(c.order) > 4*c.max {
		live := c.order[:0]
		for _, o := range c.order {
			if _, ok := c.pending[o]; ok {
				live = append(live, o)
			}
		}
		c.order = live
	}
}

// Take removes and returns the spans held for trace id (nil if none).
func (c *Capture) Take(id trace.TraceID) []sdktrace.ReadOnlySpan {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.pending[id]
	delete(c.pending, id)
	return s
}

// Pending is the number of unclaimed traces held.
func (c *Capture) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}

// Dropped is the number of unclaimed traces let go to keep the bound.
func (c *Capture) Dropped() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dropped
}

// Shutdown does nothing.
func (c *Capture) Shutdown(context.Context) error { return nil }

// ForceFlush does nothing.
func (c *Capture) ForceFlush(context.Context) error { return nil }
