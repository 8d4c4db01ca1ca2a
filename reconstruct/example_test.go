package reconstruct_test

import (
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"

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
		fmt.Printf("%-22s %6v → %v\n", s.Name, s.Start.Sub(start), s.End.Sub(start))
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
