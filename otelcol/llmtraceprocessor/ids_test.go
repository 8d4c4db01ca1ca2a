package llmtraceprocessor

import (
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/otelcol/internal/spantest"
)

// An engine span without a trace id or a span id (a broken sender; OTLP
// receivers accept it) cannot parent children in its trace (SPEC §10): its
// children had the empty parent span id, so each became a root of its
// own, or the empty trace id that backends refuse. It passes untouched.
func TestProcessorSkipsSpansWithoutIDs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		traceID pcommon.TraceID
		spanID  pcommon.SpanID
	}{
		{"no span id", pcommon.TraceID{1}, pcommon.SpanID{}},
		{"no trace id", pcommon.TraceID{}, pcommon.SpanID{2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			td := ptrace.NewTraces()
			ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
			ss.Scope().SetName("vllm.llm_engine")
			spantest.VLLM(ss, tc.traceID, tc.spanID, t0, 0.3, 1.0, 0.05, 0.2, 0.6, 10, 5, "stop")
			out := run(t, createDefaultConfig().(*Config), td)
			if n := out.SpanCount(); n != 1 {
				t.Errorf("%d spans out, want the engine span alone", n)
			}
			sp := out.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0)
			if _, ok := sp.Attributes().Get(string(attributes.ReconstructEngine)); ok {
				t.Errorf("the engine span is marked expanded")
			}
		})
	}
}
