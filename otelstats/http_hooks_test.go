package otelstats

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/spans"
)

// What an HTTP layer needs of the tracker: a preset trace id (the proxy
// sends its traceparent before it knows the model), a per-request finish
// hook (was the trace kept?), attributes on the root (http.*) and the
// stats of a request still in flight (Server-Timing).
func TestArrivalTraceIDOnFinishAttributesProgress(t *testing.T) {
	h := newHarness(t)
	tid := spans.NewTraceID()
	var got []RequestStats
	q, err := h.tr.Arrive(context.Background(), "x", Arrival{Time: at(0), Model: "m", TraceID: tid,
		OnFinish: func(s *RequestStats) { got = append(got, *s) }})
	if err != nil {
		t.Fatal(err)
	}
	if q.SpanContext().TraceID() != tid {
		t.Fatalf("trace id %v, want the preset %v", q.SpanContext().TraceID(), tid)
	}
	if _, ok := q.Progress(at(1)); !ok {
		t.Fatal("no progress for a request in flight")
	}
	if err := q.InputProcessed(at(0.5), 4, nil); err != nil {
		t.Fatal(err)
	}
	h.must(Update{RequestID: "x", Kind: KindQueued, Time: at(1)})
	h.must(Update{RequestID: "x", Kind: KindPrefilling, Time: at(3), NumComputedTokens: 4})
	h.must(Update{RequestID: "x", Kind: KindDecoding, Time: at(10)})
	p, ok := q.Progress(at(15))
	if !ok {
		t.Fatal("no progress")
	}
	wantLatency(t, "queue", p.QueueDuration, 2)
	wantLatency(t, "ttft", p.FirstTokenLatency, 10)
	wantLatency(t, "prefill", p.PrefillLatency, 7)
	wantLatency(t, "decode", p.DecodeLatency, 5)
	wantLatency(t, "e2e", p.E2ELatency, 15)
	kvs := make([]attribute.KeyValue, MaxRootAttributes+2)
	for i := range kvs {
		kvs[i] = attribute.Int("http.k", i)
	}
	kvs[0] = attribute.String("http.request.method", "POST")
	if err := q.SetAttributes(kvs...); err != nil {
		t.Fatal(err)
	}
	h.must(Update{RequestID: "x", Kind: KindFinished, Side: SideEngine, Time: at(18), FinishReason: "stop"})
	if err := q.Finish(at(20), "stop"); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].TraceID != tid.String() || !got[0].Sampled {
		t.Fatalf("OnFinish got %+v", got)
	}
	if _, ok := q.Progress(at(21)); ok {
		t.Error("progress after the request finished")
	}
	if q.SetAttributes(attribute.Bool("late", true)) == nil {
		t.Error("SetAttributes after the request finished succeeded")
	}
	root, _ := h.treeOf(h.statsOf("x"))
	if v, ok := attrOf(root.Attributes(), "http.request.method"); !ok || v.AsString() != "POST" {
		t.Errorf("root lacks http.request.method: %v", root.Attributes())
	}
	if n := h.counter("llm.attributes.truncated"); n != 2 {
		t.Errorf("%d dropped root attributes counted, want 2", n)
	}
	// A parent in ctx wins over the preset trace id.
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: spans.NewTraceID(), SpanID: spans.NewSpanID(), Remote: true})
	q2, _ := h.tr.Arrive(trace.ContextWithRemoteSpanContext(context.Background(), parent), "y", Arrival{Time: at(0), Model: "m", TraceID: tid})
	if q2.SpanContext().TraceID() != parent.TraceID() {
		t.Error("the preset trace id replaced the parent's")
	}
}
