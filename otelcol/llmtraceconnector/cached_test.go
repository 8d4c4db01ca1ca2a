package llmtraceconnector

import (
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/otelcol/internal/spantest"
)

// sumOf adds the values of every series of the counter name.
func sumOf(got series, name string) int64 {
	var n int64
	for k, p := range got {
		if strings.HasPrefix(k, name+"{") {
			n += p.value
		}
	}
	return n
}

// A span claiming more cached prompt tokens than it had prompt tokens (a
// broken engine, a hostile sender) contradicts SPEC §1 (cached ≤
// computed ≤ prompt), which the tracker rejects. The connector counted
// them as they came, so one such span made the resource's prefix-cache
// hits exceed its queries: a hit rate above 100 % for every request of
// that model.
func TestConnectorCachedAbovePromptNotCounted(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		prompt, cached       int64
		wantQueries, wantHit int64
	}{
		{"within", 100, 40, 100, 40},
		{"all cached", 100, 100, 100, 100},
		{"above prompt", 10, 1_000_000, 0, 0},
		{"zero prompt", 0, 5, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			td := ptrace.NewTraces()
			ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
			ss.Scope().SetName("vllm.llm_engine")
			sp := spantest.VLLM(ss, pcommon.TraceID{1}, pcommon.SpanID{1}, t0, 0.3, 1.0, 0.05, 0.2, 0.6, tc.prompt, 5, "stop")
			sp.Attributes().PutInt(string(attributes.EngineUsageCachedTokens), tc.cached)
			got, _ := fromPdata(runConnector(t, createDefaultConfig().(*Config), td))
			q, h := sumOf(got, attributes.MetricPrefixCacheQuery), sumOf(got, attributes.MetricPrefixCacheHits)
			if q != tc.wantQueries || h != tc.wantHit {
				t.Errorf("prefix cache queries %d, hits %d; want %d, %d", q, h, tc.wantQueries, tc.wantHit)
			}
			if p := sumOf(got, attributes.MetricPromptTokens); p != tc.prompt {
				t.Errorf("prompt tokens %d, want %d", p, tc.prompt)
			}
		})
	}
}
