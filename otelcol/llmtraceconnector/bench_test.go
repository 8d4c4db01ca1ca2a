package llmtraceconnector

import (
	"encoding/binary"
	"fmt"
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
// exist after the first batch, as in a running collector. Every batch has
// new span ids (set outside the timer), as in a running collector: a batch
// seen again would be dropped as re-delivered. The dedup_spans=0 run shows
// what remembering the spans costs.
func BenchmarkConnector(b *testing.B) {
	for _, window := range []int{createDefaultConfig().(*Config).DedupSpans, 0} {
		b.Run(fmt.Sprint("dedup_spans=", window), func(b *testing.B) { benchmarkConnector(b, window) })
	}
}

func benchmarkConnector(b *testing.B, window int) {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "vllm")
	ss := rs.ScopeSpans().AppendEmpty()
	ss.Scope().SetName("vllm.llm_engine")
	for i := range batchSpans {
		sp := spantest.VLLM(ss, pcommon.TraceID{byte(i), byte(i >> 8), 1}, pcommon.SpanID{byte(i), byte(i >> 8)}, t0, 0.3, 1.0, 0.05, 0.2, 0.6, 100, 11, "stop")
		sp.Attributes().PutStr("gen_ai.request.model", []string{"a", "b", "c"}[i%3])
	}
	cfg := createDefaultConfig().(*Config)
	cfg.DedupSpans = window
	c := newConnector(cfg, nil, new(consumertest.MetricsSink), zap.NewNop())
	now := time.Now()
	c.consume(td, now)
	spans := ss.Spans()
	batch := uint64(0)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		batch++
		for i := 0; i < spans.Len(); i++ {
			tid := spans.At(i).TraceID()
			binary.BigEndian.PutUint64(tid[8:], batch)
			spans.At(i).SetTraceID(tid)
		}
		b.StartTimer()
		c.consume(td, now)
	}
	b.ReportMetric(float64(b.N*batchSpans)/b.Elapsed().Seconds(), "spans/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batchSpans), "ns/span")
}
