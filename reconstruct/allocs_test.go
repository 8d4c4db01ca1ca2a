//go:build !race

package reconstruct

import "testing"

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
