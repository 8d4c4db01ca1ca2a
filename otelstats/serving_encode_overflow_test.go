package otelstats

import (
	"testing"
	"time"

	"github.com/llmtrace/llmtrace/attributes"
)

// SPEC §3, §5, §9: encode_duration_s is clamped into the root for every
// encoder run, not only for the eight that get an llm.encode span. Runs
// past the eighth keep no instants (maxEncodeRuns bounds the state), but
// their time outside [ARRIVED, end] — skew put them before the arrival,
// or after the client's FINISHED — is not encode time of this request any
// more than the first eight's is.
func TestEncodeRunsPastTheEighthClamped(t *testing.T) {
	// runs are ten encoder runs of 1 ms, at [from+2i, from+2i+1] ms.
	runs := func(from float64) []Update {
		var us []Update
		for i := range 10 {
			us = append(us, encoding("e", from+float64(2*i), 1, 5), encoded("e", from+float64(2*i)+1, false))
		}
		return us
	}
	cat := func(parts ...[]Update) []Update {
		var us []Update
		for _, p := range parts {
			us = append(us, p...)
		}
		return us
	}
	head := func(arrivedAt float64) []Update {
		return []Update{arrived("e", arrivedAt, "m", "chat"), inputProcessed("e", arrivedAt+0.25, 10), queued("e", 2)}
	}
	tail := []Update{prefilling("e", 40, 10, 0), decoding("e", 41, 1), enFinished("e", 42, "stop")}
	for _, tc := range []struct {
		name   string
		us     []Update
		encode float64 // ms
	}{
		{"inside the root", cat(head(0), runs(10), tail, []Update{feFinished("e", 50, "stop")}), 10},
		{"all before ARRIVED (engine clock behind)", cat(head(35), runs(10), tail, []Update{feFinished("e", 50, "stop")}), 0},
		{"the tenth across ARRIVED", cat(head(28.5), runs(10), tail, []Update{feFinished("e", 50, "stop")}), 0.5},
		{"all after the client's FINISHED (engine clock ahead)", cat(head(0), []Update{feFinished("e", 5, "stop")}, runs(10), tail), 0},
		{"the client's FINISHED inside the tenth", cat(head(0), []Update{feFinished("e", 28.5, "stop")}, runs(10), tail), 8 + 1 + 0.5},
		{"the client's FINISHED inside the ninth", cat(head(0), []Update{feFinished("e", 26.5, "stop")}, runs(10), tail), 8 + 0.5},
		{"the client's FINISHED between the ninth and the tenth", cat(head(0), []Update{feFinished("e", 27.5, "stop")}, runs(10), tail), 8 + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.feed(tc.us)
			h.tr.Flush()
			s := h.statsOf("e")
			if s.NumEncoderRuns != 10 {
				t.Fatalf("%d encoder runs, want 10", s.NumEncoderRuns)
			}
			wantLatency(t, "encode_duration", s.EncodeDuration, tc.encode)
			if s.EncodeDuration.Value > s.E2ELatency.Value {
				t.Errorf("encode_duration %v > e2e %v", s.EncodeDuration.Value, s.E2ELatency.Value)
			}
			_, kids := h.treeOf(s)
			var spans time.Duration
			n := 0
			for _, k := range kids {
				if k.Name() == attributes.SpanEncode {
					spans += k.EndTime().Sub(k.StartTime())
					n++
				}
			}
			if n != maxEncodeRuns || spans > s.EncodeDuration.Value {
				t.Errorf("%d llm.encode spans of %v, encode_duration %v", n, spans, s.EncodeDuration.Value)
			}
		})
	}
}
