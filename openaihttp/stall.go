package openaihttp

import (
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/llmtrace/llmtrace/spans"
)

// StallPolicy says when a gap between two content chunks of a stream is a
// stall: longer than Factor times the median of the request's own previous
// gaps (the last Window of them) and longer than Min, once at least MinGaps
// gaps are known. A stall is typically a preemption, a long prefill of
// another request joining the batch, or a paused engine. The zero value
// means the defaults.
type StallPolicy struct {
	Factor  float64       // default 8
	Min     time.Duration // default 100 ms
	MinGaps int           // default 4
	Window  int           // default 64
}

// Default stall policy values.
const (
	DefaultStallFactor  = 8
	DefaultStallMin     = 100 * time.Millisecond
	DefaultStallMinGaps = 4
	DefaultStallWindow  = 64
)

// maxStallEvents bounds the stall events on one stream span.
const maxStallEvents = 32

func (p StallPolicy) withDefaults() StallPolicy {
	if p.Factor <= 0 {
		p.Factor = DefaultStallFactor
	}
	if p.Min <= 0 {
		p.Min = DefaultStallMin
	}
	if p.MinGaps <= 0 {
		p.MinGaps = DefaultStallMinGaps
	}
	if p.Window <= 0 {
		p.Window = DefaultStallWindow
	}
	return p
}

// stallDetector keeps a request's running median of inter-chunk gaps over a
// sliding window (a ring in arrival order and the same gaps sorted) and
// the stalls it found.
type stallDetector struct {
	p      StallPolicy
	ring   []time.Duration
	next   int
	sorted []time.Duration
	max    time.Duration

	count  int
	events []stallEvent // the first maxStallEvents

	// The first gaps' storage: most streams are short, and a longer one
	// grows ring and sorted once or twice up to its window.
	ringBuf, sortedBuf [16]time.Duration
}

type stallEvent struct {
	at          time.Time // the gap's start
	gap, median time.Duration
	chunk       int // the content chunk that ended it
}

func newStallDetector(p StallPolicy) *stallDetector {
	d := &stallDetector{}
	d.init(p)
	return d
}

// init readies a zero detector (one embedded in the proxy's call).
func (d *stallDetector) init(p StallPolicy) {
	d.p = p.withDefaults()
	d.ring, d.sorted = d.ringBuf[:0], d.sortedBuf[:0]
}

// gap records the gap before content chunk idx, which began at start.
func (d *stallDetector) gap(g time.Duration, start time.Time, idx int) {
	if stall, med := d.add(g); stall {
		d.count++
		if len(d.events) < maxStallEvents {
			d.events = append(d.events, stallEvent{at: start, gap: g, median: med, chunk: idx})
		}
	}
}

// median of the window, and whether enough gaps are known.
func (d *stallDetector) median() (time.Duration, bool) {
	n := len(d.sorted)
	if n == 0 || n < d.p.MinGaps {
		return 0, false
	}
	if n%2 == 1 {
		return d.sorted[n/2], true
	}
	return (d.sorted[n/2-1] + d.sorted[n/2]) / 2, true
}

// anyMedian is the window's median however few gaps it holds.
func (d *stallDetector) anyMedian() (time.Duration, bool) {
	if m, ok := d.median(); ok {
		return m, true
	}
	if len(d.sorted) == 0 {
		return 0, false
	}
	return d.sorted[len(d.sorted)/2], true
}

// add records a gap and reports whether it is a stall against the median of
// the gaps before it (returned too).
func (d *stallDetector) add(gap time.Duration) (stall bool, median time.Duration) {
	med, ok := d.median()
	stall = ok && gap > d.p.Min && float64(gap) > d.p.Factor*float64(med)
	d.max = max(d.max, gap)
	if len(d.ring) < d.p.Window {
		d.ring = append(d.ring, gap)
	} else {
		old := d.ring[d.next]
		d.ring[d.next] = gap
		d.next = (d.next + 1) % d.p.Window
		i, _ := slices.BinarySearch(d.sorted, old)
		d.sorted = slices.Delete(d.sorted, i, i+1)
	}
	i, _ := slices.BinarySearch(d.sorted, gap)
	d.sorted = slices.Insert(d.sorted, i, gap)
	return stall, med
}

// spanEvents are the stall events of the stream span, their times mapped
// by in.
func (d *stallDetector) spanEvents(in func(time.Time) int64) []spans.Event {
	if len(d.events) == 0 {
		return nil
	}
	out := make([]spans.Event, len(d.events))
	attrs := make([]attribute.KeyValue, 0, 3*len(d.events))
	for i, e := range d.events {
		j := len(attrs)
		attrs = append(attrs, AttrStallGap.Float64(e.gap.Seconds()), AttrStallMedian.Float64(e.median.Seconds()), AttrStallChunk.Int(e.chunk))
		out[i] = spans.Event{Name: EventStall, Time: in(e.at), Attrs: attrs[j:len(attrs):len(attrs)]}
	}
	return out
}
