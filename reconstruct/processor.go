package reconstruct

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/spans"
)

// SpanProcessor expands engines' request spans inside a Go program that
// receives them itself (a gateway re-emitting an engine's spans, a test
// harness, a replay tool): it passes every span on to the next processor
// and, after an engine request span (Compute reports true and the engine
// is not NoExpand), the rebuilt children, parented to that span in its
// trace and under its resource, with the scope ScopeName. The engine span
// itself goes on with llm.reconstruct.engine (and llm.reconstruct.clamped
// when values were clamped) added. The children carry the engine span's
// trace flags and tracestate; a recorded but unsampled engine span gets
// none. Their span ids are derived from the engine span's trace and span
// ids (ChildSpanIDs): an engine span handed over twice yields the same
// children twice, which a backend keeps once. Other spans pass untouched.
//
// Use NewSpanProcessor; the zero SpanProcessor is not usable. It is safe
// for concurrent use, as sdktrace requires; OnEnd never blocks beyond the
// next processor's OnEnd.
type SpanProcessor struct {
	next    sdktrace.SpanProcessor
	engine  *Engine
	clamped metric.Int64Counter
	pool    sync.Pool // of *expansion
}

var _ sdktrace.SpanProcessor = (*SpanProcessor)(nil)

// NewSpanProcessor returns a SpanProcessor that hands spans to next.
func NewSpanProcessor(next sdktrace.SpanProcessor, opts ...Option) *SpanProcessor {
	c := newConfig(opts)
	p := &SpanProcessor{next: next, engine: c.engine}
	p.pool.New = func() any { return new(expansion) }
	// The counter is best effort: a meter that fails still yields a
	// no-op instrument, and recording never fails a span.
	p.clamped, _ = c.mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version())).Int64Counter(
		attributes.MetricReconstructClamped, metric.WithUnit(attributes.UnitValue),
		metric.WithDescription("Latency values of engine request spans clamped or dropped because they contradicted each other."))
	return p
}

// OnStart passes s on.
func (p *SpanProcessor) OnStart(ctx context.Context, s sdktrace.ReadWriteSpan) {
	p.next.OnStart(ctx, s)
}

// OnEnd passes s on, expanded when it is an engine request span.
func (p *SpanProcessor) OnEnd(s sdktrace.ReadOnlySpan) {
	in := FromAttributes(s.Name(), s.InstrumentationScope().Name, s.StartTime(), s.EndTime(), s.Attributes())
	if !s.SpanContext().IsValid() || hasKey(s.Attributes(), attributes.ReconstructEngine) || hasKey(s.Attributes(), attributes.Reconstructed) {
		p.next.OnEnd(s)
		return
	}
	e := Resolve(&in, p.engine)
	r, ok := Compute(&in, e)
	if !ok || e.NoExpand {
		p.next.OnEnd(s)
		return
	}
	x := p.pool.Get().(*expansion)
	t := &x.tree
	t.Reset()
	r.Tree(t)
	sc := s.SpanContext()
	extra := []attribute.KeyValue{attributes.ReconstructEngine.String(e.Name)}
	if r.Clamped > 0 {
		extra = append(extra, attributes.ReconstructClamped.Int(r.Clamped))
		p.clamped.Add(context.Background(), int64(r.Clamped))
	}
	p.next.OnEnd(&annotated{ReadOnlySpan: s, attrs: append(s.Attributes()[:len(s.Attributes()):len(s.Attributes())], extra...)})
	// A recorded but unsampled span is not exported: its children, which
	// ExportChildren marks sampled, would be orphans. The children's
	// parent is the engine span itself, so they carry its flags and
	// tracestate, as a Tracer's children of it would; their ids are
	// derived from its ids (ChildSpanIDs), so a span delivered twice
	// yields the same children twice.
	if sc.IsSampled() && len(t.Spans) > 1 {
		x.ids = ChildSpanIDs(x.ids[:0], sc.TraceID(), sc.SpanID(), t.Spans[1:])
		spans.ExportChildren(p.next, &spans.Source{Resource: s.Resource(), Scope: instrumentation.Scope{Name: ScopeName, Version: Version()}},
			sc, t.Spans[1:], x.ids)
	}
	p.pool.Put(x)
}

// expansion is the reusable memory of one OnEnd: the rebuilt tree and its
// children's ids.
type expansion struct {
	tree spans.Tree
	ids  []trace.SpanID
}

// Shutdown shuts the next processor down.
func (p *SpanProcessor) Shutdown(ctx context.Context) error { return p.next.Shutdown(ctx) }

// ForceFlush flushes the next processor.
func (p *SpanProcessor) ForceFlush(ctx context.Context) error { return p.next.ForceFlush(ctx) }

func hasKey(kvs []attribute.KeyValue, k attribute.Key) bool {
	for _, kv := range kvs {
		if kv.Key == k {
			return true
		}
	}
	return false
}

// annotated is the engine's span with the reconstruction's attributes.
type annotated struct {
	sdktrace.ReadOnlySpan
	attrs []attribute.KeyValue
}

func (a *annotated) Attributes() []attribute.KeyValue { return a.attrs }
