package otelstats

import (
	"context"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/attributes"
)

// HeadDecision is a head sampler's decision on a request, taken when it
// arrives (WithHeadSampler). The zero value, HeadUndecided, has Arrive ask
// the sampler itself.
type HeadDecision uint8

const (
	// HeadUndecided leaves the decision to Arrive.
	HeadUndecided HeadDecision = iota
	// HeadSampled lets the request's trace be kept: the end-of-request
	// policy (WithSampling), if any, still decides.
	HeadSampled
	// HeadDropped drops the request's trace. Its metrics count as any
	// other request's.
	HeadDropped
)

// Sampled reports whether d lets the trace be kept (an undecided request
// may be).
func (d HeadDecision) Sampled() bool { return d != HeadDropped }

// WithHeadSampler makes s decide, when a request arrives, whether its trace
// may be kept: the same sdktrace.Sampler a TracerProvider takes, asked
// once per request as that provider asks it for a root span, so that
// everything downstream learns the decision at arrival. The root's span
// context (Request.SpanContext, Request.Context, the traceparent a proxy
// sends upstream) carries it in its sampled flag, and a parent-based
// sampler upstream follows it. The sampler sees the trace id, the parent,
// the root's name (without the model when HeadSample is asked before the
// body is read) and kind; no attributes. Only RecordAndSample keeps a
// trace (nothing unsampled is exported, so RecordOnly drops it too), and
// the tracestate a sampler returns is not applied: the root keeps its
// parent's.
//
// An untrusted caller's parent is not shown to the sampler, which decides
// as for a root (SPEC §6: the caller's sampled flag decides nothing, and a
// parent-based sampler falls back to its root sampler, a trace id ratio
// deciding on the caller's trace id); a trusted parent
// (WithTrustParentSampling, Arrival.TrustParent) is.
//
// A trace the head sampler drops is dropped whatever the end-of-request
// policy would say; one it keeps is then up to that policy (WithSampling),
// reason "head" when there is none. Use it with WithSpanProcessor: on the
// Tracer path the TracerProvider's own sampler decides again at the end.
// otelconf builds it from OTEL_TRACES_SAMPLER.
func WithHeadSampler(s sdktrace.Sampler) Option {
	return optionFunc(func(c *config) { c.head = s })
}

// HeadSample asks the head sampler (WithHeadSampler) for its decision on a
// request that has not arrived yet, for a layer that must tell the next
// hop first: openaihttp's proxy sends the traceparent upstream before the
// body has told it the model Arrive needs. ctx carries the incoming parent
// as Arrive's does; traceID is the one to pass in Arrival.TraceID when
// there is no parent; op is the GenAI operation; trustParent is
// Arrival.TrustParent. Pass the result in Arrival.Head, so that the trace
// and what the next hop was told agree. A trusted unsampled parent is
// HeadDropped whatever the sampler (its flag settles the trace); else,
// without a head sampler or building no traces, it returns HeadSampled.
func (t *Tracker) HeadSample(ctx context.Context, traceID trace.TraceID, op string, trustParent bool) HeadDecision {
	parent := trace.SpanContextFromContext(ctx)
	if parent.IsValid() {
		traceID = parent.TraceID()
	}
	return t.decideHead(parent, trustParent || t.cfg.trustParent, traceID, op, "")
}

// decideHead is the head sampler's decision on a root of this trace id
// and parent.
func (t *Tracker) decideHead(parent trace.SpanContext, trusted bool, traceID trace.TraceID, op, model string) HeadDecision {
	s := t.cfg.head
	if t.cfg.noTraces {
		return HeadSampled
	}
	if trusted && parent.IsValid() && !parent.IsSampled() {
		// A trusted parent's flag decides (the policy drops the trace
		// whatever it says, sampler.decide): downstream is told now.
		return HeadDropped
	}
	if s == nil {
		return HeadSampled
	}
	ctx := context.Background()
	if trusted && parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
	}
	if op == "" {
		op = "chat"
	}
	res := s.ShouldSample(sdktrace.SamplingParameters{
		ParentContext: ctx, TraceID: traceID, Name: attributes.RootSpanName(op, model), Kind: trace.SpanKindServer,
	})
	if res.Decision == sdktrace.RecordAndSample {
		return HeadSampled
	}
	return HeadDropped
}
