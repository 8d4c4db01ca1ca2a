package reconstruct

import (
	"testing"
	"time"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/spans"
)

// A span that shows the first token but not the scheduling still shows
// its decode: SGLang writes no time_in_model_prefill or inference when the
// hand-off to the scheduler was not stamped (its code requires
// api_server_dispatch_finish_time), and TensorRT-LLM gives -1 for a queue
// time it could not compute. Stats derive TTFT, decode and TPOT from the
// first token and FINISHED; the waterfall must show the same decode
// segment (SPEC §10: the metrics come from the same instants as the
// children), not an empty tree.
func TestTreeDecodeWithoutScheduling(t *testing.T) {
	tests := []struct {
		name   string
		engine Engine
		span   Span
		want   string // the one child, start→end in ms
	}{
		{"sglang without the dispatch", SGLang, span(1000, lat(300, 1000, -1, -1, 700)), "llm.decode 300ms→1s"},
		{"tensorrt-llm with an unknown queue", TensorRTLLM, span(1000, lat(300, 900, -1000, -1, -1)), "llm.decode 300ms→900ms"},
		{"vllm with ttft and e2e only", VLLM, span(1000, lat(300, 1000, -1, -1, 500)), "llm.decode 300ms→800ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, ok := Compute(&tt.span, tt.engine)
			if !ok {
				t.Fatal("Compute reported nothing to rebuild")
			}
			if st := r.Stats(); st.Has&HasDecode == 0 {
				t.Fatalf("Stats = %+v, want a decode duration", st)
			}
			var tr spans.Tree
			r.Tree(&tr)
			if len(tr.Spans) != 2 {
				t.Fatalf("tree has %d spans, want the root and one llm.decode", len(tr.Spans))
			}
			d := tr.Spans[1]
			if got := d.Name + " " + time.Duration(d.Start-t0.UnixNano()).String() + "→" + time.Duration(d.End-t0.UnixNano()).String(); got != tt.want {
				t.Errorf("child = %q, want %q", got, tt.want)
			}
			for _, kv := range []struct {
				ok   bool
				what string
			}{
				{has(d.Attrs, attributes.Reconstructed.Bool(true)), "llm.reconstructed=true"},
				{has(d.Attrs, attributes.DecodeSegment.Int(0)), "llm.decode.segment=0"},
				{has(d.Attrs, attributes.DecodeOutputTokens.Int(11)), "llm.decode.output_tokens=11"},
			} {
				if !kv.ok {
					t.Errorf("llm.decode lacks %s: %v", kv.what, d.Attrs)
				}
			}
			if r.Clamped != 0 {
				t.Errorf("Clamped = %d, want 0", r.Clamped)
			}
			// Reused for a full tree, the memory leaves nothing stale.
			full := span(1001, lat(300, 1000, 50, 200, 600))
			r2, _ := Compute(&full, VLLM)
			tr.Reset()
			r2.Tree(&tr)
			if len(tr.Spans) != 5 || tr.Spans[4].Name != attributes.SpanDecode {
				t.Fatalf("reused tree has %d spans", len(tr.Spans))
			}
		})
	}
}
