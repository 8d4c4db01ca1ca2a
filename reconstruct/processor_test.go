package reconstruct_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/reconstruct"
)

// emitVLLM ends one span shaped like vLLM V1's llm_request through tp.
func emitVLLM(tp trace.TracerProvider, start time.Time, kv ...attribute.KeyValue) trace.SpanContext {
	_, s := tp.Tracer("vllm.llm_engine").Start(context.Background(), "llm_request",
		trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(start), trace.WithAttributes(kv...))
	s.End(trace.WithTimestamp(start.Add(1001 * time.Millisecond)))
	return s.SpanContext()
}

func vllmAttrs() []attribute.KeyValue {
	return []attribute.KeyValue{
		attributes.LatencyTimeToFirstToken.Float64(0.3), attributes.LatencyE2E.Float64(1.0),
		attributes.LatencyTimeInQueue.Float64(0.05), attributes.LatencyPrefill.Float64(0.2),
		attributes.LatencyDecode.Float64(0.6), attributes.LatencyInference.Float64(0.8),
		attributes.EngineUsagePromptTokens.Int(100), attributes.EngineUsageCompletionTokens.Int(11),
	}
}

func TestSpanProcessorExpandsEngineSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(reconstruct.NewSpanProcessor(rec, reconstruct.WithMeterProvider(mp))))
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	sc := emitVLLM(tp, start, vllmAttrs()...)
	// A contradicting span: e2e longer than the span.
	emitVLLM(tp, start, attributes.LatencyTimeToFirstToken.Float64(0.3), attributes.LatencyE2E.Float64(9))
	// Not an engine span.
	_, other := tp.Tracer("router").Start(context.Background(), "route")
	other.End()

	ended := rec.Ended()
	var children, engine, passed int
	for _, s := range ended {
		switch {
		case hasKV(s.Attributes(), attributes.Reconstructed.Bool(true)):
			children++
			if s.Parent().SpanID() != sc.SpanID() && s.SpanContext().TraceID() == sc.TraceID() {
				t.Errorf("%s is not parented to the engine span", s.Name())
			}
			if s.InstrumentationScope().Name != reconstruct.ScopeName {
				t.Errorf("%s has scope %q", s.Name(), s.InstrumentationScope().Name)
			}
		case hasKV(s.Attributes(), attributes.ReconstructEngine.String("vllm")):
			engine++
		default:
			passed++
			if s.Name() != "route" {
				t.Errorf("span %q passed without reconstruction", s.Name())
			}
		}
	}
	// First span: 4 children; second: no queue or prefill key, so no run
	// (nothing anchors a prefill span), but its first token and end give
	// its decode segment.
	if engine != 2 || passed != 1 || children != 5 {
		t.Errorf("engine spans %d, children %d, others %d; want 2, 5, 1", engine, children, passed)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var clamped int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == attributes.MetricReconstructClamped {
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					clamped += dp.Value
				}
			}
		}
	}
	if clamped != 1 {
		t.Errorf("%s = %d, want 1", attributes.MetricReconstructClamped, clamped)
	}
}

func TestSpanProcessorDoesNotExpandTwice(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	inner := reconstruct.NewSpanProcessor(rec)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(reconstruct.NewSpanProcessor(inner)))
	emitVLLM(tp, time.Now(), vllmAttrs()...)
	if n := len(rec.Ended()); n != 5 {
		t.Errorf("two processors in a row gave %d spans, want 5 (one expansion)", n)
	}
}

func hasKV(kvs []attribute.KeyValue, want attribute.KeyValue) bool {
	for _, kv := range kvs {
		if kv == want {
			return true
		}
	}
	return false
}

// A forced engine is for engine spans: llmtrace's own roots already have
// their children, so WithEngine must not expand them again.
func TestSpanProcessorForcedEngineLeavesLLMTraceRoots(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(reconstruct.NewSpanProcessor(rec, reconstruct.WithEngine(reconstruct.VLLM))))
	_, s := tp.Tracer("github.com/llmtrace/llmtrace/otelstats").Start(context.Background(), "chat m", trace.WithAttributes(vllmAttrs()...))
	s.End()
	if n := len(rec.Ended()); n != 1 {
		t.Errorf("llmtrace's root under a forced engine gave %d spans, want itself alone", n)
	}
}

// stateSampler records every span; it samples (or not) and writes a
// tracestate, as a consistent-probability sampler does.
type stateSampler struct{ sample bool }

func (s stateSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	ts, _ := trace.ParseTraceState("ot=th:8")
	d := sdktrace.RecordOnly
	if s.sample {
		d = sdktrace.RecordAndSample
	}
	return sdktrace.SamplingResult{Decision: d, Tracestate: ts}
}
func (stateSampler) Description() string { return "state" }

// The rebuilt children are the engine span's children: they carry its
// sampling decision, flags and tracestate. A recorded but unsampled engine
// span (which exporters drop) gets no sampled children of its own to
// export as orphans.
func TestSpanProcessorChildrenFollowTheEngineSpan(t *testing.T) {
	for _, sample := range []bool{true, false} {
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(stateSampler{sample}),
			sdktrace.WithSpanProcessor(reconstruct.NewSpanProcessor(rec)))
		sc := emitVLLM(tp, time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), vllmAttrs()...)
		children := 0
		for _, s := range rec.Ended() {
			if !hasKV(s.Attributes(), attributes.Reconstructed.Bool(true)) {
				continue
			}
			children++
			c := s.SpanContext()
			if c.IsSampled() != sc.IsSampled() || c.TraceFlags() != sc.TraceFlags() {
				t.Errorf("sampled %v: child %s has flags %v, its engine span %v", sample, s.Name(), c.TraceFlags(), sc.TraceFlags())
			}
			if c.TraceState().String() != sc.TraceState().String() {
				t.Errorf("sampled %v: child %s has tracestate %q, its engine span %q", sample, s.Name(), c.TraceState(), sc.TraceState())
			}
		}
		if sample && children != 4 {
			t.Errorf("a sampled engine span got %d children, want 4", children)
		}
	}
}

// An engine span delivered twice (an exporter retrying a send that
// arrived) is expanded into the same children both times: their ids are
// derived from the engine span's, so a backend keeps one copy of each
// phase rather than showing every phase twice.
func TestSpanProcessorRedeliveryGivesSameChildren(t *testing.T) {
	src := tracetest.NewSpanRecorder()
	emitVLLM(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(src)), time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), vllmAttrs()...)
	engine := src.Ended()[0]
	sc := engine.SpanContext()

	children := func() map[string]trace.SpanID {
		rec := tracetest.NewSpanRecorder()
		reconstruct.NewSpanProcessor(rec).OnEnd(engine) // a fresh processor: another collector replica
		ids := map[string]trace.SpanID{}
		for _, s := range rec.Ended() {
			if !hasKV(s.Attributes(), attributes.Reconstructed.Bool(true)) {
				continue
			}
			id := s.SpanContext().SpanID()
			if !id.IsValid() || id == sc.SpanID() {
				t.Errorf("%s has span id %v (engine span %v)", s.Name(), id, sc.SpanID())
			}
			if s.Parent().SpanID() != sc.SpanID() || s.SpanContext().TraceID() != sc.TraceID() {
				t.Errorf("%s is not the engine span's child", s.Name())
			}
			ids[s.Name()] = id
		}
		return ids
	}
	first, second := children(), children()
	if len(first) != 4 {
		t.Fatalf("%d children, want 4", len(first))
	}
	seen := map[trace.SpanID]string{}
	for name, id := range first {
		if second[name] != id {
			t.Errorf("%s: span id %v on the first delivery, %v on the second", name, id, second[name])
		}
		if other, dup := seen[id]; dup {
			t.Errorf("%s and %s share span id %v", name, other, id)
		}
		seen[id] = name
	}
}
