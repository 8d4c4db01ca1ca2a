package llmtraceconnector

import (
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.uber.org/zap"

	"github.com/llmtrace/llmtrace/otelcol/internal/spantest"
)

const batchSpans = 512

// BenchmarkConnector measures deriving the metrics of 512 vLLM request
// spans per batch: spans/s per core and allocations per span. The series
// exist after the first batch, as in a running collector.
func BenchmarkConnector(b *testing.B) {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "vllm")
	ss := rs.ScopeSpans().AppendEmpty()
	ss.Scope().SetName("vllm.llm_engine")
	for i := range batchSpans {
		sp := spantest.VLLM(ss, pcommon.TraceID{byte(i), 1}, pcommon.SpanID{byte(i)}, t0, 0.3, 1.0, 0.05, 0.2, 0.6, 100, 11, "stop")
		sp.Attributes().PutStr("gen_ai.request.model", []string{"a", "b", "c"}[i%3])
	}
	c := newConnector(createDefaultConfig().(*Config), nil, new(consumertest.MetricsSink), zap.NewNop())
	now := time.Now()
	c.consume(td, now)
	b.ReportAllocs()
	for b.Loop() {
		c.consume(td, now)
	}
	b.ReportMetric(float64(b.N*batchSpans)/b.Elapsed().Seconds(), "spans/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batchSpans), "ns/span")
}
