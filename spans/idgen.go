package spans

import (
	"context"
	"encoding/binary"
	"math/rand/v2"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

type presetKey struct{}

type presetIDs struct {
	traceID trace.TraceID
	spanID  trace.SpanID
}

func withPresetIDs(ctx context.Context, tid trace.TraceID, sid trace.SpanID) context.Context {
	return context.WithValue(ctx, presetKey{}, presetIDs{tid, sid})
}

// IDGenerator returns an sdktrace.IDGenerator that gives a root span the
// trace and span ids handed out when its request arrived (so a request's
// context can be propagated downstream before its spans exist) and draws
// random ids otherwise. Configure the TracerProvider with
// sdktrace.WithIDGenerator(spans.IDGenerator()); without it, root spans get
// fresh ids and downstream spans that joined at arrival are orphaned.
func IDGenerator() sdktrace.IDGenerator { return idGenerator{} }

type idGenerator struct{}

var _ sdktrace.IDGenerator = idGenerator{}

func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if p, ok := ctx.Value(presetKey{}).(presetIDs); ok {
		return p.traceID, p.spanID
	}
	return NewTraceID(), NewSpanID()
}

func (idGenerator) NewSpanID(ctx context.Context, traceID trace.TraceID) trace.SpanID {
	if p, ok := ctx.Value(presetKey{}).(presetIDs); ok && p.traceID == traceID {
		return p.spanID
	}
	return NewSpanID()
}

// NewTraceID draws a random, valid trace id.
func NewTraceID() trace.TraceID {
	var t trace.TraceID
	for !t.IsValid() {
		binary.BigEndian.PutUint64(t[:8], rand.Uint64())
		binary.BigEndian.PutUint64(t[8:], rand.Uint64())
	}
	return t
}

// NewSpanID draws a random, valid span id.
func NewSpanID() trace.SpanID {
	var s trace.SpanID
	for !s.IsValid() {
		binary.BigEndian.PutUint64(s[:], rand.Uint64())
	}
	return s
}

// ContextWithIDs returns ctx asking IDGenerator to give the next span
// started in it trace id tid and span id sid (a child gets sid when its
// parent's trace is tid): for a span whose id had to be propagated before
// the span could be built, such as a proxy's call upstream, emitted once
// the request has ended.
func ContextWithIDs(ctx context.Context, tid trace.TraceID, sid trace.SpanID) context.Context {
	return withPresetIDs(ctx, tid, sid)
}
