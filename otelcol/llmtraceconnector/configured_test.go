package llmtraceconnector

import (
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/otelcol/internal/spantest"
)

// A configured model or adapter is compared with the span's name, which
// arrives cut at reconstruct.MaxNameLength bytes with invalid UTF-8
// replaced. Configured as written, a name past the cap (a served model
// named by its path) or not UTF-8 could never match: every request of the
// one model the operator listed became "other". The tracker cleans its
// configured names the same way for the same reason.
func TestConnectorConfiguredNamesMatchCutNames(t *testing.T) {
	long := "/mnt/models/" + strings.Repeat("é", 100) + "/llama-3-8b-instruct"
	for _, name := range []string{"llama-3-8b", long, "llama\xff3"} {
		t.Run(name[:min(len(name), 16)], func(t *testing.T) {
			td := ptrace.NewTraces()
			ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
			ss.Scope().SetName("vllm.llm_engine")
			sp := spantest.VLLM(ss, pcommon.TraceID{1}, pcommon.SpanID{1}, t0, 0.3, 1.0, 0.05, 0.2, 0.6, 10, 5, "stop")
			sp.Attributes().PutStr(string(attributes.RequestModel), name)
			sp.Attributes().PutStr(string(attributes.LoRAAdapter), name)
			cfg := createDefaultConfig().(*Config)
			cfg.Models, cfg.Adapters = []string{name}, []string{name}
			got, _ := fromPdata(runConnector(t, cfg, td))
			for k := range got {
				if strings.Contains(k, attributes.OtherModel) {
					t.Errorf("the configured name became %q: %s", attributes.OtherModel, k)
				}
			}
		})
	}
}
