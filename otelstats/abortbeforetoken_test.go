package otelstats

import (
	"testing"

	"github.com/llmtrace/llmtrace/attributes"
)

// TestEngineTokensAfterClientAbort (SPEC §2: an abort before the first
// token has no TTFT): the client leaves at 8 ms, before any token; the
// engine, a step behind, makes two tokens after that (9, 25 ms) and then
// aborts. No frontend delivered a token, so the engine's DECODING times
// would stand in — but these tokens never reached anyone: no TTFT, TPOT,
// prefill or decode latency, no ITL gap in the histogram, no llm.decode
// span. The tokens still count (the engine made them). With the client's
// FINISHED a stop, or an engine token before the abort, they stand in.
func TestEngineTokensAfterClientAbort(t *testing.T) {
	for _, c := range []struct {
		name     string
		reason   string
		decodes  []float64
		wantTTFT float64 // ms; 0: absent
		wantITLs uint64
	}{
		{"abort before the engine's tokens", FinishAbort, []float64{9, 25}, 0, 0},
		{"error before the engine's tokens", FinishError, []float64{9, 25}, 0, 0},
		{"abort after the engine's first token", FinishAbort, []float64{6, 9}, 6, 1},
		{"stop before the engine's tokens (clock skew)", FinishStop, []float64{9, 25}, 8, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			fe := func(u Update) { u.RequestID, u.Side = "x", SideFrontend; h.must(u) }
			en := func(u Update) { u.RequestID, u.Side = "x", SideEngine; h.must(u) }
			fe(Update{Kind: KindArrived, Time: at(0), Model: "m"})
			fe(Update{Kind: KindInputProcessed, Time: at(1), NumPromptTokens: 5})
			en(Update{Kind: KindQueued, Time: at(2)})
			en(Update{Kind: KindPrefilling, Time: at(3), NumComputedTokens: 5})
			fe(Update{Kind: KindFinished, Time: at(8), FinishReason: c.reason})
			for _, ms := range c.decodes {
				en(Update{Kind: KindDecoding, Time: at(ms), NumNewTokens: 1})
			}
			en(Update{Kind: KindFinished, Time: at(26), FinishReason: c.reason})
			s := h.statsOf("x")
			if s.NumOutputTokens != 2 {
				t.Errorf("output tokens = %d, want 2", s.NumOutputTokens)
			}
			if c.wantTTFT == 0 {
				for name, l := range map[string]Latency{"TTFT": s.FirstTokenLatency, "TPOT": s.TimePerOutputToken,
					"prefill": s.PrefillLatency, "decode": s.DecodeLatency} {
					if l.Valid {
						t.Errorf("%s = %v, want absent: no token reached the client", name, l.Value)
					}
				}
				if s.OutputTokenLatencies != nil {
					t.Errorf("ITLs = %v, want absent", s.OutputTokenLatencies)
				}
				if n, _ := h.histCount(attributes.MetricTimeToFirstToken); n != 0 {
					t.Errorf("TTFT histogram count = %d, want 0", n)
				}
				_, kids := h.treeOf(s)
				for _, k := range kids {
					if k.Name() == attributes.SpanDecode {
						t.Errorf("an llm.decode span %v–%v, want none", msSince(k.StartTime()), msSince(k.EndTime()))
					}
				}
			} else {
				if !s.FirstTokenLatency.Valid || ms(s.FirstTokenLatency.Value) != c.wantTTFT {
					t.Errorf("TTFT = %+v, want %vms", s.FirstTokenLatency, c.wantTTFT)
				}
			}
			if n, _ := h.histCount(attributes.MetricInterTokenLatency); n != c.wantITLs {
				t.Errorf("ITL histogram count = %d, want %d", n, c.wantITLs)
			}
			if !s.InferenceLatency.Valid || !s.E2ELatency.Valid || ms(s.E2ELatency.Value) != 8 {
				t.Errorf("inference %+v, e2e %+v: want both, e2e 8ms", s.InferenceLatency, s.E2ELatency)
			}
		})
	}
}
