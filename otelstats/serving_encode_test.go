package otelstats

import (
	"testing"

	"github.com/llmtrace/llmtrace/attributes"
)

// SPEC §9: an encoder run happens before or during prefill, and the prefill
// it feeds ends at the run's first token. A run still open when that token
// comes — its ENCODED reported in the same step after the DECODING, later,
// or never — ends there: encode_duration_s and llm.encode never stretch
// over the decode, and the ENCODED that closes a run begun during prefill
// is not a rejection. Starting a run once decoding began still is.
func TestEncoderRunEndsByFirstToken(t *testing.T) {
	head := []Update{arrived("e", 0, "m", "chat"), inputProcessed("e", 1, 10), queued("e", 2),
		prefilling("e", 3, 5, 0), encoding("e", 4, 1, 5), decoding("e", 10, 1)}
	tail := []Update{decoding("e", 500, 1), enFinished("e", 1000, "stop"), feFinished("e", 1001, "stop")}
	for _, tc := range []struct {
		name   string
		mid    []Update
		encode float64 // ms
		hit    bool
	}{
		{"ENCODED in the first token's step", []Update{encoded("e", 10, true)}, 6, true},
		{"ENCODED after the first token", []Update{encoded("e", 200, false)}, 6, false},
		{"no ENCODED", nil, 6, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.feed(append(append(append([]Update(nil), head...), tc.mid...), tail...))
			s := h.statsOf("e")
			wantLatency(t, "encode_duration", s.EncodeDuration, tc.encode)
			if s.NumEncoderRuns != 1 {
				t.Errorf("encoder runs %d, want 1", s.NumEncoderRuns)
			}
			_, kids := h.treeOf(s)
			n := 0
			for _, k := range kids {
				if k.Name() != attributes.SpanEncode {
					continue
				}
				n++
				if got := msSince(k.EndTime()); got != 10 {
					t.Errorf("llm.encode ends at %v ms, want 10 (the first token)", got)
				}
				if v, _ := attrOf(k.Attributes(), attributes.EncodeCacheHit); v.AsBool() != tc.hit {
					t.Errorf("llm.encode.cache_hit %v, want %v", v.AsBool(), tc.hit)
				}
			}
			if n != 1 {
				t.Errorf("%d llm.encode spans, want 1", n)
			}
			h.wantHist(attributes.MetricEncodeDuration, 1, tc.encode)
		})
	}
	t.Run("ENCODING after the first token", func(t *testing.T) {
		h := newHarness(t)
		h.feed(head[:4])
		h.must(decoding("e", 10, 1))
		if err := h.tr.Record(encoding("e", 11, 1, 5)); err == nil {
			t.Fatal("ENCODING after DECODING accepted")
		}
		if err := h.tr.Record(encoded("e", 12, false)); err == nil {
			t.Fatal("ENCODED without an open run accepted")
		}
	})
}
