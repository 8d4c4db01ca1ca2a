package spans

import (
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/attributes"
)

// Span is one span of a request's tree as plain data.
type Span struct {
	Name       string
	Kind       trace.SpanKind
	Start, End time.Time
	Attrs      []attribute.KeyValue
	Events     []Event
	Status     codes.Code
	StatusDesc string
}

// Event is a span event with an explicit time.
type Event struct {
	Name  string
	Time  time.Time
	Attrs []attribute.KeyValue
}

// Tree is a request's span tree: Spans[0] is the root, every other span is
// its direct child, in start-time order of the phases.
type Tree struct {
	Spans   []Span
	Clamped int // spans moved or shortened to keep them inside the root

	evAttrs []attribute.KeyValue // every event's attributes, back to back

	TraceID trace.TraceID
	SpanID  trace.SpanID
	Parent  trace.SpanContext
	// Link, when valid, is the root's one link.
	Link trace.SpanContext
}

// Reset empties t for reuse, keeping its memory.
func (t *Tree) Reset() {
	for i := range t.Spans {
		t.Spans[i] = Span{Attrs: t.Spans[i].Attrs[:0], Events: t.Spans[i].Events[:0]}
	}
	t.Spans = t.Spans[:0]
	t.evAttrs = t.evAttrs[:0]
	t.Clamped = 0
	t.TraceID, t.SpanID, t.Parent, t.Link = trace.TraceID{}, trace.SpanID{}, trace.SpanContext{}, trace.SpanContext{}
}

// Build computes tl's span tree into dst, reusing dst's memory (call
// dst.Reset first when reusing). It never produces a negative duration or a
// child outside the root.
func Build(tl *Timeline, dst *Tree) {
	dst.TraceID, dst.SpanID, dst.Parent, dst.Link = tl.TraceID, tl.SpanID, tl.Parent, tl.Link
	start, end := tl.Start, tl.End
	if end.Before(start) {
		end = start
		dst.Clamped++
	}
	engineEnd := tl.EngineEnd
	if engineEnd.IsZero() {
		engineEnd = end
	}
	root := dst.add(tl.Name, trace.SpanKindServer, start, end)
	root.Attrs = append(root.Attrs, tl.RootAttrs...)
	root.Status, root.StatusDesc = tl.Status, tl.StatusDesc
	if tl.RootOnly {
		return
	}

	if !tl.InputProcessed.IsZero() {
		s := dst.child(start, end, attributes.SpanInputProcessing, start, tl.InputProcessed)
		if tl.InputTokens >= 0 {
			s.Attrs = append(s.Attrs, attributes.UsageInputTokens.Int(tl.InputTokens))
		}
	}

	// The handoff to the engine, where a waterfall would otherwise show an
	// unexplained gap (SPEC §3).
	if !tl.InputProcessed.IsZero() && tl.FirstQueued.After(tl.InputProcessed) {
		dst.child(start, end, attributes.SpanHandoff, tl.InputProcessed, tl.FirstQueued)
	}

	// Waits: the first queueing, then one after every preemption.
	if !tl.FirstQueued.IsZero() {
		waitEnd := engineEnd
		if len(tl.Runs) > 0 {
			waitEnd = tl.Runs[0].Start
		}
		s := dst.child(start, end, attributes.SpanQueue, tl.FirstQueued, waitEnd)
		s.Attrs = append(s.Attrs, attributes.QueueReason.String(attributes.QueueReasonNew))
	}
	segment := 0
	for i := range tl.Runs {
		r := &tl.Runs[i]
		runEnd := r.Preempted
		if runEnd.IsZero() {
			runEnd = engineEnd
		}
		prefillEnd := r.FirstToken
		if prefillEnd.IsZero() {
			prefillEnd = runEnd
		}
		p := dst.child(start, end, attributes.SpanPrefill, r.Start, prefillEnd)
		p.Attrs = append(p.Attrs,
			attributes.PrefillComputedTokens.Int(r.ComputedTokens),
			attributes.PrefillCachedTokens.Int(r.CachedTokens),
			attributes.PrefillChunks.Int(r.Chunks),
			attributes.PrefillRecompute.Bool(i > 0),
		)
		for j, ev := range r.ChunkEvents {
			t := clampTime(ev.Time, p.Start, p.End)
			p.Events = append(p.Events, Event{
				Name: attributes.EventPrefillChunk,
				Time: t,
				Attrs: dst.eventAttrs(
					attributes.ChunkIndex.Int(j+1),
					attributes.PrefillComputedTokens.Int(ev.ComputedTokens),
				),
			})
		}
		if !r.FirstToken.IsZero() {
			// A run preempted right after its first token can see that
			// token delivered after the PREEMPTED: the segment then
			// lasts zero time at the delivery (no skew, nothing to
			// count), and the prefill ends at the delivery too.
			d := dst.child(start, end, attributes.SpanDecode, r.FirstToken, later(runEnd, r.FirstToken))
			d.Attrs = append(d.Attrs,
				attributes.DecodeOutputTokens.Int(r.OutputTokens),
				attributes.DecodeSegment.Int(segment),
			)
			for _, st := range r.Steps {
				d.Events = append(d.Events, Event{
					Name: attributes.EventDecodeStep,
					Time: clampTime(st.Time, d.Start, d.End),
					Attrs: dst.eventAttrs(
						attributes.StepIndex.Int64(st.Index),
						attributes.StepBatchSize.Int(st.BatchSize),
					),
				})
			}
			if len(r.TokenTimes) > 0 {
				offs := make([]int64, len(r.TokenTimes))
				for i, tt := range r.TokenTimes {
					offs[i] = max(tt.Sub(d.Start).Microseconds(), 0)
				}
				d.Attrs = append(d.Attrs, attributes.DecodeTokenOffsets.Int64Slice(offs))
			}
			segment++
		}
		if !r.Preempted.IsZero() {
			waitEnd := engineEnd
			if i+1 < len(tl.Runs) {
				waitEnd = tl.Runs[i+1].Start
			}
			q := dst.child(start, end, attributes.SpanQueue, r.Preempted, waitEnd)
			q.Attrs = append(q.Attrs, attributes.QueueReason.String(attributes.QueueReasonPreempted))
		}
	}

	if d := tl.Detokenize; d != nil {
		s := dst.child(start, end, attributes.SpanDetokenize, d.First, d.Last)
		s.Attrs = append(s.Attrs,
			attributes.DetokenizeBusyTime.Float64(d.Busy.Seconds()),
			attributes.DetokenizeDeliveries.Int(d.Deliveries),
		)
	}
}

// eventAttrs stores an event's attributes in the tree's reused buffer. An
// event keeps its slice even if a later append moves the buffer: the old
// array stays valid, only no longer shared.
func (t *Tree) eventAttrs(kv ...attribute.KeyValue) []attribute.KeyValue {
	i := len(t.evAttrs)
	t.evAttrs = append(t.evAttrs, kv...)
	return t.evAttrs[i:len(t.evAttrs):len(t.evAttrs)]
}

func (t *Tree) add(name string, kind trace.SpanKind, s, e time.Time) *Span {
	if len(t.Spans) < cap(t.Spans) {
		t.Spans = t.Spans[:len(t.Spans)+1]
	} else {
		t.Spans = append(t.Spans, Span{})
	}
	sp := &t.Spans[len(t.Spans)-1]
	sp.Name, sp.Kind, sp.Start, sp.End = name, kind, s, e
	return sp
}

// child adds an INTERNAL span clamped into [lo, hi].
func (t *Tree) child(lo, hi time.Time, name string, s, e time.Time) *Span {
	cs, ce := clampTime(s, lo, hi), clampTime(e, lo, hi)
	if ce.Before(cs) {
		ce = cs
	}
	if !cs.Equal(s) || !ce.Equal(e) {
		t.Clamped++
	}
	return t.add(name, trace.SpanKindInternal, cs, ce)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func clampTime(t, lo, hi time.Time) time.Time {
	if t.Before(lo) {
		return lo
	}
	if t.After(hi) {
		return hi
	}
	return t
}
