package llmtraceconnector

import (
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/llmtrace/llmtrace/attributes"
)

// SGLang's disaggregated instances name their root spans "prefill Req
// <rid>" and "decode Req <rid>" and set no llm.pd.role: both instances'
// requests landed in one series, a prefill instance's TTFT (it ends after
// the first token) mixed with the decode instance's (SPEC §7: every
// instance histogram carries llm.pd.role).
func TestConnectorSGLangRole(t *testing.T) {
	td := ptrace.NewTraces()
	ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
	ss.Scope().SetName("sglang server")
	for i, name := range []string{"prefill Req 1a2b3c4d", "decode Req 1a2b3c4d"} {
		sp := ss.Spans().AppendEmpty()
		sp.SetTraceID(pcommon.TraceID{1})
		sp.SetSpanID(pcommon.SpanID{byte(i + 1)})
		sp.SetName(name)
		sp.SetStartTimestamp(pcommon.NewTimestampFromTime(t0))
		sp.SetEndTimestamp(pcommon.NewTimestampFromTime(t0.Add(1e9)))
		a := sp.Attributes()
		a.PutDouble(string(attributes.LatencyTimeToFirstToken), 0.3)
		a.PutDouble(string(attributes.LatencyE2E), 1)
		a.PutDouble(string(attributes.LatencyPrefill), 0.25)
		a.PutDouble(string(attributes.LatencyDecode), 0.7)
	}
	got, _ := fromPdata(runConnector(t, createDefaultConfig().(*Config), td))
	for _, role := range []string{"prefill", "decode"} {
		k := "gen_ai.server.time_to_first_token{gen_ai.provider.name=sglang,llm.pd.role=" + role + "}"
		if p, ok := got[k]; !ok || p.count != 1 {
			t.Errorf("missing %s: %v", k, keys(got))
		}
	}
}
