package llmtraceconnector

import (
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/llmtrace/llmtrace/otelcol/internal/spantest"
)

// vLLM V0 sums completion tokens over a request's sequences
// (gen_ai.usage.num_sequences): 40 tokens of 4 sequences gave a TPOT of
// 0.7 s / 39, a quarter of any sequence's. No TPOT then; the generation
// tokens stay the total.
func TestConnectorNoTPOTForSeveralSequences(t *testing.T) {
	td := ptrace.NewTraces()
	ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
	ss.Scope().SetName("vllm.llm_engine")
	sp := spantest.VLLM(ss, pcommon.TraceID{1}, pcommon.SpanID{1}, t0, 0.3, 1.0, 0.05, 0.2, 0.6, 100, 40, "stop")
	sp.Attributes().PutInt("gen_ai.usage.num_sequences", 4)
	got, _ := fromPdata(runConnector(t, createDefaultConfig().(*Config), td))
	if p, ok := got["gen_ai.server.time_per_output_token{gen_ai.provider.name=vllm}"]; ok {
		t.Errorf("TPOT recorded for 4 sequences: %+v", p)
	}
	if p := got["llm.server.generation_tokens{gen_ai.provider.name=vllm}"]; p.value != 40 {
		t.Errorf("generation tokens %d, want 40", p.value)
	}
}
