package reconstruct

import (
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/spans"
)

// Tree builds the request's span tree into dst (call dst.Reset first when
// reusing it) with spans.Build: dst.Spans[0] is the engine's own span as
// the root the children were clamped into (the caller already has it and
// must not emit it again); dst.Spans[1:] are the children, in lifecycle
// order, each carrying llm.reconstructed=true: llm.input_processing
// (ARRIVED → InputDone, where visible), llm.queue (QUEUED → PREFILLING),
// llm.prefill (PREFILLING → first token) and one llm.decode segment
// (first token → last token, or FINISHED): preemptions are not visible in
// a single span; the decode segment is there whenever the first token is,
// even when the scheduling is not. Clamps Build makes are added to
// r.Clamped. A request with
// Engine.NoExpand gets the root alone.
func (r *Request) Tree(dst *spans.Tree) {
	tl := spans.Timeline{
		Start: unixNs(r.Arrived), End: unixNs(r.End), EngineEnd: unixNs(r.Finished),
		InputProcessed: unixNs(r.InputDone), InputTokens: r.InputTokens,
		FirstQueued: unixNs(r.Queued), RootOnly: r.Engine.NoExpand,
	}
	if !r.LastToken.IsZero() {
		tl.EngineEnd = unixNs(r.LastToken)
	}
	if tl.InputTokens < 0 {
		tl.InputTokens = -1
	}
	var runs [1]spans.Run
	if !r.Prefilling.IsZero() {
		runs[0] = spans.Run{Start: unixNs(r.Prefilling), FirstToken: unixNs(r.FirstToken), OutputTokens: max(r.OutputTokens, 0)}
		tl.Runs = runs[:]
	}
	before := dst.Clamped
	spans.Build(&tl, dst)
	if tl.Runs == nil && !r.FirstToken.IsZero() && !tl.RootOnly {
		// The first token shows but not the scheduling (SGLang without
		// its dispatch stamp, TensorRT-LLM's unknown queue time): no run
		// can start, yet the decode segment is known, and Stats derive
		// its duration from the same instants.
		decodeOnly(dst, tl.Start, tl.End, unixNs(r.FirstToken), tl.EngineEnd, max(r.OutputTokens, 0))
	}
	r.Clamped += dst.Clamped - before
	for i := 1; i < len(dst.Spans); i++ {
		sp := &dst.Spans[i]
		if sp.Name == attributes.SpanPrefill {
			// Build states chunking and computed/cached tokens; a single
			// span shows neither chunks nor what was computed, so keep only
			// what the engine reported.
			sp.Attrs = append(sp.Attrs[:0], attributes.PrefillRecompute.Bool(false))
			if r.InputTokens >= 0 {
				sp.Attrs = append(sp.Attrs, attributes.PrefillComputedTokens.Int(r.InputTokens))
			}
			if r.CachedTokens >= 0 {
				sp.Attrs = append(sp.Attrs, attributes.PrefillCachedTokens.Int(r.CachedTokens))
			}
		}
		if sp.Name == attributes.SpanDecode && r.OutputTokens < 0 {
			sp.Attrs = dropKey(sp.Attrs, attributes.DecodeOutputTokens)
		}
		sp.Attrs = append(sp.Attrs, attributes.Reconstructed.Bool(true))
	}
}

// decodeOnly appends the one decode segment [first, end] to dst, clamped
// into the root [lo, hi] as spans.Build clamps its children.
func decodeOnly(dst *spans.Tree, lo, hi, first, end int64, tokens int) {
	s, e := min(max(first, lo), hi), min(max(end, lo), hi)
	e = max(e, s)
	if s != first || e != end {
		dst.Clamped++
	}
	n := len(dst.Spans)
	if n < cap(dst.Spans) {
		dst.Spans = dst.Spans[:n+1]
	} else {
		dst.Spans = append(dst.Spans, spans.Span{})
	}
	sp := &dst.Spans[n]
	*sp = spans.Span{Name: attributes.SpanDecode, Kind: trace.SpanKindInternal, Start: s, End: e,
		Attrs:  append(sp.Attrs[:0], attributes.DecodeOutputTokens.Int(tokens), attributes.DecodeSegment.Int(0)),
		Events: sp.Events[:0]}
}

func dropKey(kvs []attribute.KeyValue, k attribute.Key) []attribute.KeyValue {
	out := kvs[:0]
	for _, kv := range kvs {
		if kv.Key != k {
			out = append(out, kv)
		}
	}
	return out
}

// unixNs is t as spans.Timeline keeps instants: Unix nanoseconds, 0 for
// one that never happened.
func unixNs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}
