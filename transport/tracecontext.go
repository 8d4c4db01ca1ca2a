package transport

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// parseParent reads a W3C trace context (an update's traceparent and
// tracestate, in either encoding); ok is false when it is not one.
func parseParent(traceparent, tracestate string) (sc trace.SpanContext, ok bool) {
	c := propagation.MapCarrier{"traceparent": traceparent}
	if tracestate != "" {
		c["tracestate"] = tracestate
	}
	sc = trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), c))
	return sc, sc.IsValid()
}

// formatParent writes sc as traceparent and tracestate.
func formatParent(sc trace.SpanContext) (traceparent, tracestate string) {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(trace.ContextWithRemoteSpanContext(context.Background(), sc), c)
	return c["traceparent"], c["tracestate"]
}
