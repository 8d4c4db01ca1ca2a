//go:build !race

package reconstruct

import (
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// Compute runs once per exported span inside SpanProcessor.OnEnd; its doc
// promises it does not allocate.
func TestComputeDoesNotAllocate(t *testing.T) {
	s := span(1001, lat(300, 1000, 50, 200, 600))
	for _, e := range []Engine{VLLM, VLLMV0, SGLang, TensorRTLLM} {
		if n := testing.AllocsPerRun(100, func() { Compute(&s, e) }); n != 0 {
			t.Errorf("%s: Compute allocates %v times", e.Name, n)
		}
	}
}

// ChildSpanIDs runs once per expanded engine span, into reused memory.
func TestChildSpanIDsDoNotAllocate(t *testing.T) {
	dst := make([]trace.SpanID, 0, len(fourChildren))
	if n := testing.AllocsPerRun(100, func() {
		dst = ChildSpanIDs(dst[:0], trace.TraceID{1}, trace.SpanID{2}, fourChildren)
	}); n != 0 {
		t.Errorf("ChildSpanIDs allocates %v times", n)
	}
}
