package spans

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Emit starts and ends every span of t through tracer with t's explicit
// timestamps, and returns the root's span context. When the root is not
// recording (the sampler dropped it) the children are skipped: they would
// be dropped as well, and skipping them is most of the saving of sampling.
func (t *Tree) Emit(ctx context.Context, tracer trace.Tracer) trace.SpanContext {
	if len(t.Spans) == 0 {
		return trace.SpanContext{}
	}
	if t.Parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, t.Parent)
	} else {
		// The root must not inherit a span that happens to be in ctx.
		ctx = trace.ContextWithSpanContext(ctx, trace.SpanContext{})
	}
	if t.TraceID.IsValid() && t.SpanID.IsValid() {
		ctx = withPresetIDs(ctx, t.TraceID, t.SpanID)
	}
	r := &t.Spans[0]
	opts := []trace.SpanStartOption{trace.WithSpanKind(r.Kind), trace.WithTimestamp(time.Unix(0, r.Start)), trace.WithAttributes(r.Attrs...)}
	if t.Link.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: t.Link}))
	}
	_, root := tracer.Start(ctx, r.Name, opts...)
	sc := root.SpanContext()
	if root.IsRecording() {
		// Children get a context without the preset ids so they draw fresh
		// span ids.
		cctx := trace.ContextWithSpan(context.Background(), root)
		for i := 1; i < len(t.Spans); i++ {
			c := &t.Spans[i]
			_, s := tracer.Start(cctx, c.Name,
				trace.WithSpanKind(c.Kind),
				trace.WithTimestamp(time.Unix(0, c.Start)),
				trace.WithAttributes(c.Attrs...),
			)
			for _, ev := range c.Events {
				s.AddEvent(ev.Name, trace.WithTimestamp(time.Unix(0, ev.Time)), trace.WithAttributes(ev.Attrs...))
			}
			if c.Status != 0 {
				s.SetStatus(c.Status, c.StatusDesc)
			}
			s.End(trace.WithTimestamp(time.Unix(0, c.End)))
		}
		if r.Status != 0 {
			root.SetStatus(r.Status, r.StatusDesc)
		}
	}
	root.End(trace.WithTimestamp(time.Unix(0, r.End)))
	return sc
}
