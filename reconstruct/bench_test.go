package reconstruct

import (
	"testing"
	"time"

	"github.com/llmtrace/llmtrace/spans"
)

// BenchmarkComputeTree is the library's per-span cost: rebuild the instants,
// derive the stats and build the children into a reused tree.
func BenchmarkComputeTree(b *testing.B) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s := Span{Start: start, End: start.Add(time.Second), InputTokens: 100, OutputTokens: 11, CachedTokens: 0,
		Latency: Latency{TTFT: 0.3, E2E: 1, Queue: 0.05, Prefill: 0.2, Decode: 0.6, Inference: 0.8}}
	var t spans.Tree
	b.ReportAllocs()
	for b.Loop() {
		r, _ := Compute(&s, VLLM)
		_ = r.Stats()
		t.Reset()
		r.Tree(&t)
	}
}
