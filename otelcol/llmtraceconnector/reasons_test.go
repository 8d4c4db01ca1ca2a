package llmtraceconnector

import (
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/llmtrace/llmtrace/attributes"
)

// TensorRT-LLM's finish reasons are stop, length, timeout and cancelled
// (CompletionOutput.finish_reason; an abort, a client gone, is cancelled).
// A cancelled or timed-out request was counted as a success: no error.type
// on gen_ai.server.request.duration (SPEC §4: failures and aborts carry
// it), and its model name earned a series.
func TestConnectorTensorRTLLMFailureReasons(t *testing.T) {
	td := ptrace.NewTraces()
	ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
	ss.Scope().SetName("trt.api_server")
	for i, reason := range []string{"cancelled", "timeout"} {
		sp := ss.Spans().AppendEmpty()
		sp.SetTraceID(pcommon.TraceID{byte(i + 1)})
		sp.SetSpanID(pcommon.SpanID{byte(i + 1)})
		sp.SetName("llm_request")
		sp.SetStartTimestamp(pcommon.NewTimestampFromTime(t0))
		sp.SetEndTimestamp(pcommon.NewTimestampFromTime(t0.Add(2e9)))
		a := sp.Attributes()
		a.PutDouble(string(attributes.LatencyE2E), 2)
		a.PutDouble(string(attributes.LatencyTimeInQueue), 0.1)
		a.PutDouble(string(attributes.LatencyTimeToFirstToken), -1)
		a.PutStr(string(attributes.RequestModel), "junk-"+reason)
		a.PutStr(string(attributes.FinishReasons), `["`+reason+`"]`)
	}
	cfg := createDefaultConfig().(*Config)
	got, _ := fromPdata(runConnector(t, cfg, td))
	for _, reason := range []string{"cancelled", "timeout"} {
		k := "gen_ai.server.request.duration{error.type=" + reason + ",gen_ai.provider.name=tensorrt-llm,gen_ai.request.model=other}"
		if p, ok := got[k]; !ok || p.count != 1 {
			t.Errorf("missing %s: %v", k, keys(got))
		}
	}
}
