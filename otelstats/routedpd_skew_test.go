package otelstats

import (
	"context"
	"testing"

	"github.com/llmtrace/llmtrace/attributes"
)

// SPEC §2, §7: llm.pd.decode_ttft_s (first content token − send to D) is
// never negative: a decodeSent after the first token (a caller's clock or
// order mixed up) gives 0, as every derived duration that skew would make
// negative (some, the README's "Derived durations and skew"); without a
// token it is absent. No span is clamped, so llm.spans.clamped is not
// counted.
func TestRoutedPDDecodeTTFTNeverNegative(t *testing.T) {
	for _, tc := range []struct {
		name       string
		decodeSent float64 // ms
		token      bool    // a token at 60 ms
		want       float64 // ms; -1: absent
	}{
		{"sent before the first token", 41, true, 19},
		{"sent after the first token", 65, true, 0},
		{"no token", 41, false, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			q, _ := h.tr.Arrive(context.Background(), "route", Arrival{Time: at(0), Model: "m"})
			if err := q.RoutedPD(at(1), at(40), at(tc.decodeSent)); err != nil {
				t.Fatal(err)
			}
			if tc.token {
				if err := q.Detokenized(at(60), 1, 0); err != nil {
					t.Fatal(err)
				}
			}
			if err := q.Finish(at(70), "stop"); err != nil {
				t.Fatal(err)
			}
			s := h.statsOf("route")
			wantLatency(t, "pd_decode_ttft", s.PDDecodeTTFT, tc.want)
			root, _ := h.treeOf(s)
			v, ok := attrOf(root.Attributes(), attributes.PDDecodeTTFT)
			if ok != (tc.want >= 0) || ok && v.AsFloat64() != tc.want/1e3 {
				t.Errorf("llm.pd.decode_ttft_s = %s (present %v), want %v ms", v.String(), ok, tc.want)
			}
			if s.ClampedSpans != 0 {
				t.Errorf("%d spans clamped", s.ClampedSpans)
			}
		})
	}
}

// TestRoutedPDInsideTheRoot (SPEC §3, §5: every instant lies inside the
// root): RoutedPD's instants before the request's arrival or after its end
// (a caller's clock behind, or times from another process) are clamped
// into [ARRIVED, FINISHED], as the spans' are, so llm.pd.decode_ttft_s is
// never more than the TTFT, nor llm.pd.prefill_duration_s more than e2e.
func TestRoutedPDInsideTheRoot(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		sent, responded, dSent float64 // ms; arrival at 10, token at 60, end at 70
		prefill, decodeTTFT    float64 // ms
	}{
		{"inside", 11, 40, 41, 29, 19},
		{"sent before arrival", 0, 40, 2, 30, 50},
		{"responded after the end", 20, 90, 95, 50, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			q, _ := h.tr.Arrive(context.Background(), "route", Arrival{Time: at(10), Model: "m"})
			if err := q.RoutedPD(at(tc.sent), at(tc.responded), at(tc.dSent)); err != nil {
				t.Fatal(err)
			}
			if err := q.Detokenized(at(60), 1, 0); err != nil {
				t.Fatal(err)
			}
			if err := q.Finish(at(70), "stop"); err != nil {
				t.Fatal(err)
			}
			s := h.statsOf("route")
			wantLatency(t, "pd_prefill_duration", s.PDPrefillDuration, tc.prefill)
			wantLatency(t, "pd_decode_ttft", s.PDDecodeTTFT, tc.decodeTTFT)
			if s.PDDecodeTTFT.Value > s.FirstTokenLatency.Value {
				t.Errorf("pd_decode_ttft %v > TTFT %v", s.PDDecodeTTFT.Value, s.FirstTokenLatency.Value)
			}
		})
	}
}
