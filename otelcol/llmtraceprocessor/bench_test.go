package llmtraceprocessor

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/llmtrace/llmtrace/otelcol/internal/spantest"
)

const batchSpans = 512

// batch is 512 vLLM request spans in one resource, as a batch processor
// hands them over.
func batch() ptrace.Traces {
	td := ptrace.NewTraces()
	ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
	ss.Scope().SetName("vllm.llm_engine")
	for i := range batchSpans {
		spantest.VLLM(ss, pcommon.TraceID{byte(i), byte(i >> 8), 1}, pcommon.SpanID{byte(i), 2}, t0.Add(time.Duration(i)*time.Millisecond),
			0.3, 1.0, 0.05, 0.2, 0.6, 100, 11, "stop")
	}
	return td
}

// BenchmarkProcessor measures expanding engine spans: spans/s per core
// (one goroutine) and allocations per engine span (each adds 4 children).
// The copy of the input batch each iteration is outside the timer.
func BenchmarkProcessor(b *testing.B) {
	x := newExpander(nil)
	src := batch()
	b.ReportAllocs()
	var elapsed time.Duration
	for b.Loop() {
		b.StopTimer()
		td := ptrace.NewTraces()
		src.CopyTo(td)
		b.StartTimer()
		start := time.Now()
		if _, err := x.processTraces(context.Background(), td); err != nil {
			b.Fatal(err)
		}
		elapsed += time.Since(start)
	}
	b.ReportMetric(float64(b.N*batchSpans)/elapsed.Seconds(), "spans/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batchSpans), "ns/span")
}

// BenchmarkPassThrough is the naive twin: the same batch of spans without
// latency keys, which the processor only reads.
func BenchmarkPassThrough(b *testing.B) {
	x := newExpander(nil)
	td := batch()
	sss := td.ResourceSpans().At(0).ScopeSpans().At(0).Spans()
	for i := 0; i < sss.Len(); i++ {
		sss.At(i).Attributes().Clear()
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := x.processTraces(context.Background(), td); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*batchSpans)/b.Elapsed().Seconds(), "spans/s")
}
