package reconstruct_test

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/reconstruct"
	"github.com/llmtrace/llmtrace/spans"
)

// Rebuild the waterfall of one vLLM llm_request span.
func ExampleCompute() {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	in := reconstruct.FromAttributes("llm_request", "vllm.llm_engine", start, start.Add(1001*time.Millisecond),
		[]attribute.KeyValue{
			attributes.LatencyTimeToFirstToken.Float64(0.3),
			attributes.LatencyE2E.Float64(1.0),
			attributes.LatencyTimeInQueue.Float64(0.05),
			attributes.LatencyPrefill.Float64(0.2),
			attributes.LatencyDecode.Float64(0.6),
			attributes.EngineUsageCompletionTokens.Int(11),
		})
	r, ok := reconstruct.Compute(&in, reconstruct.Detect(&in))
	if !ok {
		return
	}
	var t spans.Tree
	r.Tree(&t)
	for _, s := range t.Spans[1:] {
		fmt.Printf("%-22s %6v → %v\n", s.Name, time.Duration(s.Start-start.UnixNano()), time.Duration(s.End-start.UnixNano()))
	}
	st := r.Stats()
	fmt.Println("engine", r.Engine.Name, "TTFT", st.TTFT, "TPOT", st.TPOT, "clamped", r.Clamped)
	// Output:
	// llm.input_processing       0s → 50ms
	// llm.queue                50ms → 100ms
	// llm.prefill             100ms → 300ms
	// llm.decode              300ms → 900ms
	// engine vllm TTFT 300ms TPOT 70ms clamped 0
}

// Expand engine spans in a Go program that receives them: the processor
// passes every span on and adds the rebuilt children after each engine
// request span.
func ExampleNewSpanProcessor() {
	rec := tracetest.NewSpanRecorder() // stands in for a BatchSpanProcessor and its exporter
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(reconstruct.NewSpanProcessor(rec)))
	defer tp.Shutdown(context.Background())

	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	_, s := tp.Tracer("vllm.llm_engine").Start(context.Background(), "llm_request",
		trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(start),
		trace.WithAttributes(
			attributes.LatencyTimeToFirstToken.Float64(0.3), attributes.LatencyE2E.Float64(1.0),
			attributes.LatencyTimeInQueue.Float64(0.05), attributes.LatencyPrefill.Float64(0.2),
			attributes.LatencyDecode.Float64(0.6)))
	s.End(trace.WithTimestamp(start.Add(time.Second)))

	for _, sp := range rec.Ended() {
		fmt.Printf("%-22s parent=%v %v → %v\n", sp.Name(), sp.Parent().SpanID() == s.SpanContext().SpanID(),
			sp.StartTime().Sub(start), sp.EndTime().Sub(start))
	}
	// Output:
	// llm_request            parent=false 0s → 1s
	// llm.input_processing   parent=true 0s → 50ms
	// llm.queue              parent=true 50ms → 100ms
	// llm.prefill            parent=true 100ms → 300ms
	// llm.decode             parent=true 300ms → 900ms
}
