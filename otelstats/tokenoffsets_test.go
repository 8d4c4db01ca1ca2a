package otelstats

import (
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/llmtrace/llmtrace/attributes"
)

// TestTokenOffsetsFollowTheirRun: at DetailTokens each decode segment's
// llm.decode.token_offsets_us lists the deliveries of the tokens its run
// made (README, "Token time per run"), so its length agrees with the
// segment's llm.decode.output_tokens, and no offset lies before the
// segment's start. A run preempted and resumed before its last token
// reached the client keeps that token's delivery.
func TestTokenOffsetsFollowTheirRun(t *testing.T) {
	cases := []struct {
		name string
		us   []Update
		want []string // offsets per decode segment, in order
	}{
		{
			name: "one run",
			us: []Update{arrived("a", 0, "m", "chat"), queued("a", 1), prefilling("a", 2, 4, 0),
				decoding("a", 10, 1), detok("a", 11, 1, 0), decoding("a", 20, 1), detok("a", 21, 1, 0),
				enFinished("a", 20, "stop"), feFinished("a", 22, "stop")},
			want: []string{"[0,10000]"},
		},
		{
			name: "run 0's last token delivered after run 1 began",
			us: []Update{arrived("a", 0, "m", "chat"), queued("a", 1), prefilling("a", 2, 4, 0),
				decoding("a", 10, 1), detok("a", 11, 1, 0), decoding("a", 12, 1),
				preempted("a", 13), prefilling("a", 15, 6, 0),
				detok("a", 16, 1, 0), // the token decoded at 12, in run 0
				decoding("a", 20, 1), detok("a", 21, 1, 0), decoding("a", 30, 1), detok("a", 31, 1, 0),
				enFinished("a", 30, "stop"), feFinished("a", 32, "stop")},
			// Segment 0 runs [11, 13] and made 2 tokens, delivered at 11
			// and 16; segment 1 starts at its first delivery, 21.
			want: []string{"[0,5000]", "[0,10000]"},
		},
		{
			name: "preempted before any token was delivered",
			us: []Update{arrived("a", 0, "m", "chat"), queued("a", 1), prefilling("a", 2, 4, 0),
				decoding("a", 10, 2), preempted("a", 12), prefilling("a", 14, 6, 0),
				detok("a", 15, 2, 0), decoding("a", 20, 1), detok("a", 21, 1, 0),
				enFinished("a", 20, "stop"), feFinished("a", 22, "stop")},
			want: []string{"[0]", "[0]"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, WithDetail(DetailTokens))
			h.feed(tc.us)
			_, kids := h.treeOf(h.statsOf("a"))
			var segs []sdktrace.ReadOnlySpan
			for _, k := range kids {
				if k.Name() == attributes.SpanDecode {
					segs = append(segs, k)
				}
			}
			if len(segs) != len(tc.want) {
				t.Fatalf("%d decode segments, want %d", len(segs), len(tc.want))
			}
			for i, s := range segs {
				if got := sattr(s.Attributes(), attributes.DecodeTokenOffsets); got != tc.want[i] {
					t.Errorf("segment %d (%s tokens): offsets %s, want %s", i,
						sattr(s.Attributes(), attributes.DecodeOutputTokens), got, tc.want[i])
				}
			}
		})
	}
}
