package spans

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/attributes"
)

// Span is one span of a request's tree as plain data. Times are Unix
// nanoseconds.
type Span struct {
	Name       string
	Kind       trace.SpanKind
	Start, End int64
	Attrs      []attribute.KeyValue
	Events     []Event
	Status     codes.Code
	StatusDesc string
}

// Event is a span event with an explicit time (Unix nanoseconds).
type Event struct {
	Name  string
	Time  int64
	Attrs []attribute.KeyValue
}

// Tree is a request's span tree: Spans[0] is the root, every other span is
// its direct child: the phases in start-time order (input processing, the
// waits and the KV transfer, each run's prefill and decode), then the
// encoder runs, then detokenization.
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
	if end < start {
		end = start
		dst.Clamped++
	}
	engineEnd := tl.EngineEnd
	if engineEnd == 0 {
		engineEnd = end
	}
	root := dst.add(tl.Name, trace.SpanKindServer, start, end)
	root.Attrs = append(root.Attrs, tl.RootAttrs...)
	root.Status, root.StatusDesc = tl.Status, tl.StatusDesc
	if tl.RootOnly {
		return
	}
	b := builder{t: dst, lo: start, hi: end, engineEnd: engineEnd}
	b.input(tl)
	b.firstWait(tl)
	b.runs(tl)
	for _, e := range tl.Encodes {
		s := b.child(attributes.SpanEncode, e.Start, e.End)
		s.Attrs = append(s.Attrs, attributes.EncodeItems.Int(e.Items), attributes.EncodeCacheHit.Bool(e.CacheHit))
		if e.Tokens > 0 {
			// num_encoder_tokens is optional: 0 would claim a count
			// nobody reported (SPEC §2).
			s.Attrs = append(s.Attrs, attributes.EncodeTokens.Int(e.Tokens))
		}
	}
	if d := tl.Detokenize; d != nil {
		s := b.child(attributes.SpanDetokenize, d.First, d.Last)
		s.Attrs = append(s.Attrs, attributes.DetokenizeDeliveries.Int(d.Deliveries))
		if d.Busy > 0 {
			// Only a frontend that measured it reports it: 0 s would
			// claim a measurement nobody made (SPEC §2).
			s.Attrs = append(s.Attrs, attributes.DetokenizeBusyTime.Float64(d.Busy.Seconds()))
		}
	}
}

// builder adds a tree's children, clamped into the root [lo, hi].
type builder struct {
	t         *Tree
	lo, hi    int64
	engineEnd int64
}

func (b *builder) child(name string, s, e int64) *Span { return b.t.child(b.lo, b.hi, name, s, e) }

// input adds input processing and the handoff to the engine, where a
// waterfall would otherwise show an unexplained gap (SPEC §3).
func (b *builder) input(tl *Timeline) {
	if tl.InputProcessed == 0 {
		return
	}
	s := b.child(attributes.SpanInputProcessing, tl.Start, tl.InputProcessed)
	if tl.InputTokens >= 0 {
		s.Attrs = append(s.Attrs, attributes.UsageInputTokens.Int(tl.InputTokens))
	}
	if tl.FirstQueued > tl.InputProcessed {
		b.child(attributes.SpanHandoff, tl.InputProcessed, tl.FirstQueued)
	}
}

// firstWait adds the wait before the first run: one queue span, or on a
// decode instance the wait for the KV cache, its transfer and the wait
// after it (SPEC §7).
func (b *builder) firstWait(tl *Timeline) {
	waitEnd := b.engineEnd
	if len(tl.Runs) > 0 {
		waitEnd = tl.Runs[0].Start
	}
	kv := tl.KVTransfer
	if kv == nil {
		if tl.FirstQueued != 0 {
			b.queue(tl.FirstQueued, waitEnd, attributes.QueueReasonNew)
		}
		return
	}
	if tl.FirstQueued != 0 {
		b.queue(tl.FirstQueued, kv.Wait, attributes.QueueReasonNew)
	}
	ready := kv.Ready
	if ready == 0 {
		ready = b.engineEnd
	}
	s := b.child(attributes.SpanKVTransfer, kv.Wait, ready)
	s.Attrs = append(s.Attrs, attributes.KVTransferTokens.Int(kv.Tokens), attributes.KVTransferSource.String(kv.Source))
	if kv.Bytes > 0 {
		// kv_bytes is optional: absent when not reported, not 0 B.
		s.Attrs = append(s.Attrs, attributes.KVTransferBytes.Int64(kv.Bytes))
	}
	if kv.Failed {
		s.Attrs = append(s.Attrs, attributes.ErrorType.String(attributes.ErrorKVTransferFailed))
		s.Status, s.StatusDesc = codes.Error, attributes.ErrorKVTransferFailed
	}
	if kv.Ready != 0 {
		b.queue(kv.Ready, waitEnd, attributes.QueueReasonKVReady)
	}
}

func (b *builder) queue(s, e int64, reason string) {
	q := b.child(attributes.SpanQueue, s, e)
	q.Attrs = append(q.Attrs, attributes.QueueReason.String(reason))
}

// runs adds each run's prefill and decode segment, and the wait after each
// preemption.
func (b *builder) runs(tl *Timeline) {
	segment := 0
	for i := range tl.Runs {
		r := &tl.Runs[i]
		runEnd := r.Preempted
		if runEnd == 0 {
			runEnd = b.engineEnd
		}
		b.prefill(r, i > 0, runEnd)
		if r.FirstToken != 0 {
			b.decode(r, segment, runEnd)
			segment++
		}
		if r.Preempted != 0 {
			waitEnd := b.engineEnd
			if i+1 < len(tl.Runs) {
				waitEnd = tl.Runs[i+1].Start
			}
			b.queue(r.Preempted, waitEnd, attributes.QueueReasonPreempted)
		}
	}
}

func (b *builder) prefill(r *Run, recompute bool, runEnd int64) {
	prefillEnd := r.FirstToken
	if prefillEnd == 0 {
		prefillEnd = runEnd
	}
	p := b.child(attributes.SpanPrefill, r.Start, prefillEnd)
	p.Attrs = append(p.Attrs,
		attributes.PrefillComputedTokens.Int(r.ComputedTokens),
		attributes.PrefillCachedTokens.Int(r.CachedTokens),
		attributes.PrefillChunks.Int(r.Chunks),
		attributes.PrefillRecompute.Bool(recompute),
	)
	if r.RemoteTokens > 0 {
		p.Attrs = append(p.Attrs, attributes.PrefillRemoteTokens.Int(r.RemoteTokens))
	}
	for j, ev := range r.ChunkEvents {
		p.Events = append(p.Events, Event{
			Name: attributes.EventPrefillChunk,
			Time: clamp(ev.Time, p.Start, p.End),
			Attrs: b.t.eventAttrs(
				attributes.ChunkIndex.Int(j+1),
				attributes.PrefillComputedTokens.Int(ev.ComputedTokens),
			),
		})
	}
}

// decode adds a run's decode segment. A run preempted right after its
// first token can see that token delivered after the PREEMPTED: the segment
// then lasts zero time at the delivery (no skew, nothing to count), and the
// prefill ends at the delivery too.
func (b *builder) decode(r *Run, segment int, runEnd int64) {
	d := b.child(attributes.SpanDecode, r.FirstToken, max(runEnd, r.FirstToken))
	d.Attrs = append(d.Attrs,
		attributes.DecodeOutputTokens.Int(r.OutputTokens),
		attributes.DecodeSegment.Int(segment),
	)
	if r.SpecSteps > 0 {
		d.Attrs = append(d.Attrs, attributes.SpecDraftTokens.Int(r.DraftTokens),
			attributes.SpecAcceptedTokens.Int(r.AcceptedTokens), attributes.SpecSteps.Int(r.SpecSteps))
	}
	for _, st := range r.Steps {
		d.Events = append(d.Events, Event{
			Name:  attributes.EventDecodeStep,
			Time:  clamp(st.Time, d.Start, d.End),
			Attrs: b.t.stepAttrs(st),
		})
	}
	if len(r.TokenTimes) > 0 {
		offs := make([]int64, len(r.TokenTimes))
		for i, tt := range r.TokenTimes {
			offs[i] = max((tt-d.Start)/1e3, 0)
		}
		d.Attrs = append(d.Attrs, attributes.DecodeTokenOffsets.Int64Slice(offs))
	}
}

// stepAttrs are a step event's numbers, those the engine said: a DECODING
// recorded on its own has neither, and 0 would claim a step 0 in a batch
// of 0 (SPEC §2: absent, never zero).
func (t *Tree) stepAttrs(st StepEvent) []attribute.KeyValue {
	switch {
	case st.Index > 0 && st.BatchSize > 0:
		return t.eventAttrs(attributes.StepIndex.Int64(st.Index), attributes.StepBatchSize.Int(st.BatchSize))
	case st.Index > 0:
		return t.eventAttrs(attributes.StepIndex.Int64(st.Index))
	case st.BatchSize > 0:
		return t.eventAttrs(attributes.StepBatchSize.Int(st.BatchSize))
	}
	return nil
}

// eventAttrs stores an event's attributes in the tree's reused buffer. An
// event keeps its slice even if a later append moves the buffer: the old
// array stays valid, only no longer shared.
func (t *Tree) eventAttrs(kv ...attribute.KeyValue) []attribute.KeyValue {
	i := len(t.evAttrs)
	t.evAttrs = append(t.evAttrs, kv...)
	return t.evAttrs[i:len(t.evAttrs):len(t.evAttrs)]
}

func (t *Tree) add(name string, kind trace.SpanKind, s, e int64) *Span {
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
func (t *Tree) child(lo, hi int64, name string, s, e int64) *Span {
	cs, ce := clamp(s, lo, hi), clamp(e, lo, hi)
	if ce < cs {
		ce = cs
	}
	if cs != s || ce != e {
		t.Clamped++
	}
	return t.add(name, trace.SpanKindInternal, cs, ce)
}

func clamp(t, lo, hi int64) int64 { return min(max(t, lo), hi) }
