package llmtraceconnector

import (
	"fmt"
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/llmtrace/llmtrace/attributes"
)

// A request whose span has an error status failed, whatever its finish
// reason says (none, or one the engine wrote before failing): the
// connector gives it error.type, yet it let such a request admit its
// model and adapter names. A sender of failing requests with invented
// names and no failure reason took every max_models slot, and the served
// model became "other".
func TestConnectorErrorStatusDoesNotAdmitNames(t *testing.T) {
	for _, reason := range []string{"", "stop"} {
		t.Run("reason="+reason, func(t *testing.T) {
			td := ptrace.NewTraces()
			ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
			ss.Scope().SetName("vllm.llm_engine")
			vllmSpan := func(i byte, model string) ptrace.Span {
				sp := ss.Spans().AppendEmpty()
				sp.SetTraceID(pcommon.TraceID{i + 1})
				sp.SetSpanID(pcommon.SpanID{i + 1})
				sp.SetName("llm_request")
				sp.SetStartTimestamp(pcommon.NewTimestampFromTime(t0))
				sp.SetEndTimestamp(pcommon.NewTimestampFromTime(t0.Add(1e9)))
				sp.Attributes().PutDouble(string(attributes.LatencyE2E), 1)
				sp.Attributes().PutDouble(string(attributes.LatencyTimeToFirstToken), 0.3)
				sp.Attributes().PutStr(string(attributes.RequestModel), model)
				sp.Attributes().PutStr(string(attributes.LoRAAdapter), model)
				if reason != "" {
					sp.Attributes().PutStr(string(attributes.FinishReasons), `["`+reason+`"]`)
				}
				return sp
			}
			for i := range byte(5) {
				vllmSpan(i, fmt.Sprintf("junk-%d", i)).Status().SetCode(ptrace.StatusCodeError)
			}
			vllmSpan(9, "llama-3-8b")
			cfg := createDefaultConfig().(*Config)
			cfg.MaxModels = 2
			got, _ := fromPdata(runConnector(t, cfg, td))
			want := func(model string) string {
				a := map[string]string{string(attributes.ProviderName): "vllm", string(attributes.RequestModel): model,
					string(attributes.LoRAAdapter): model}
				if reason != "" {
					a[string(attributes.FinishReason)] = reason
				}
				return key(attributes.MetricRequests, a)
			}
			served, other := got[want("llama-3-8b")].value, got[want(attributes.OtherModel)].value
			if served != 1 || other != 5 {
				t.Errorf("served model %d, other %d; want 1, 5: %v", served, other, keys(got))
			}
		})
	}
}
