package reconstruct

import (
	"math"
	"testing"
	"time"

	"github.com/llmtrace/llmtrace/spans"
)

// FuzzCompute feeds arbitrary, mostly malformed spans through every
// mapping: nothing panics, every instant lies inside the span in lifecycle
// order, every child inside the span with a non-negative duration, every
// Stats duration non-negative.
func FuzzCompute(f *testing.F) {
	f.Add(int64(0), int64(1e9), 0.3, 1.0, 0.05, 0.2, 0.6, 11, uint8(0))
	f.Add(int64(5e9), int64(1e9), -1.0, math.Inf(1), math.NaN(), -3e9, 1e300, -4, uint8(3))
	f.Add(int64(math.MaxInt64/2), int64(math.MinInt64/2), 0.0, 0.0, 0.0, 0.0, 0.0, 0, uint8(4))
	engines := []Engine{VLLM, VLLMV0, TensorRTLLM, SGLang, LLMTrace}
	f.Fuzz(func(t *testing.T, startNs, durNs int64, ttft, e2e, queue, prefill, decode float64, out int, engine uint8) {
		start := time.Unix(0, startNs)
		s := Span{Start: start, End: start.Add(time.Duration(durNs)), OutputTokens: out, InputTokens: -1, CachedTokens: -1,
			Latency: Latency{TTFT: ttft, E2E: e2e, Queue: queue, Prefill: prefill, Decode: decode, Inference: math.NaN()}}
		r, ok := Compute(&s, engines[int(engine)%len(engines)])
		if !ok {
			return
		}
		order := []time.Time{r.Arrived, r.InputDone, r.Queued, r.Prefilling, r.FirstToken, r.LastToken, r.Finished, r.End}
		prev := r.Arrived
		for i, in := range order {
			if in.IsZero() {
				continue
			}
			if in.Before(prev) || in.After(r.End) || in.Before(r.Arrived) {
				t.Fatalf("instant %d at %v is out of order or outside [%v, %v]", i, in, r.Arrived, r.End)
			}
			prev = in
		}
		st := r.Stats()
		for _, d := range []time.Duration{st.E2E, st.TTFT, st.Queue, st.Prefill, st.Decode, st.Inference, st.TPOT} {
			if d < 0 {
				t.Fatalf("negative duration in %+v", st)
			}
		}
		var tr spans.Tree
		r.Tree(&tr)
		for _, c := range tr.Spans {
			if c.End < c.Start || c.Start < r.Arrived.UnixNano() || c.End > r.End.UnixNano() {
				t.Fatalf("span %s [%v, %v] outside [%v, %v]", c.Name, c.Start, c.End, r.Arrived, r.End)
			}
		}
	})
}
