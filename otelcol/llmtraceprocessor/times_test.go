package llmtraceprocessor

import (
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/otelcol/internal/spantest"
)

// OTLP timestamps are unsigned nanoseconds (to 2554), the rebuilt tree's
// are an int64 (to 2262): pdata reads a later one back wrapped into
// 1677–1970. An engine span across 2262 (a hostile or broken sender) got
// six spurious clamps and four children collapsed onto its start; a span
// wholly past 2262 was expanded only because both ends wrapped alike.
// Either passes untouched.
func TestProcessorLeavesSpansPast2262(t *testing.T) {
	const edge = uint64(1) << 63
	for _, tc := range []struct {
		name       string
		start, end uint64
	}{
		{"across 2262", edge - 5e8, edge + 5e8},
		{"after 2262", edge + 1e18, edge + 1e18 + 2e9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			td := ptrace.NewTraces()
			ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
			ss.Scope().SetName("vllm.llm_engine")
			sp := spantest.VLLM(ss, pcommon.TraceID{1}, pcommon.SpanID{2}, t0, 0.3, 1.0, 0.05, 0.2, 0.6, 10, 5, "stop")
			sp.SetStartTimestamp(pcommon.Timestamp(tc.start))
			sp.SetEndTimestamp(pcommon.Timestamp(tc.end))
			out := run(t, createDefaultConfig().(*Config), td)
			if n := out.SpanCount(); n != 1 {
				t.Errorf("%d spans out, want the engine span alone", n)
			}
			a := out.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0).Attributes()
			for _, k := range []attribute.Key{attributes.ReconstructEngine, attributes.ReconstructClamped} {
				if v, ok := a.Get(string(k)); ok {
					t.Errorf("the engine span has %s=%s", k, v.AsString())
				}
			}
		})
	}
}
