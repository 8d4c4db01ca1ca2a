package transport

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/llmtrace/llmtrace/otelstats"
)

// A speculative DECODING without NumNewTokens yields accepted + 1 tokens
// (otelstats' default, as a vLLM step does): the update log's writer must
// not write the plain step's default, 1, which the reader would then take
// as given and reject by accepted ≤ num_new_tokens.
func TestSpecDecodingLineRoundTrip(t *testing.T) {
	cases := []struct {
		name                       string
		newTokens, draft, accepted int
		wantOut                    int // the request's output tokens: the first one + the step's
	}{
		{"plain, no count", 0, 0, 0, 2},
		{"speculative, no count", 0, 4, 3, 5},
		{"speculative, none accepted", 0, 4, 0, 2},
		{"speculative, explicit count", 2, 4, 1, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out int
			tr, err := otelstats.NewTracker(otelstats.WithMeterProvider(noop.NewMeterProvider()),
				otelstats.WithOnFinish(func(s *otelstats.RequestStats) { out = s.NumOutputTokens }))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tr.Shutdown(context.Background()) }()
			t0 := time.Unix(1_700_000_000, 0)
			at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
			en := otelstats.SideEngine
			us := []otelstats.Update{
				{RequestID: "s", Kind: otelstats.KindArrived, Time: at(0), Model: "m"},
				{RequestID: "s", Kind: otelstats.KindQueued, Time: at(1)},
				{RequestID: "s", Kind: otelstats.KindPrefilling, Time: at(2), NumComputedTokens: 10},
				{RequestID: "s", Kind: otelstats.KindDecoding, Time: at(3), NumNewTokens: 1},
				{RequestID: "s", Kind: otelstats.KindDecoding, Time: at(4), NumNewTokens: tc.newTokens,
					NumDraftTokens: tc.draft, NumAcceptedTokens: tc.accepted},
				{RequestID: "s", Kind: otelstats.KindFinished, Side: en, Time: at(5), FinishReason: "stop"},
			}
			for i := range us {
				line := AppendUpdateJSON(nil, &us[i])
				u, err := ParseUpdate(line)
				if err != nil {
					t.Fatalf("ParseUpdate(%s): %v", line, err)
				}
				if err := tr.Record(u); err != nil {
					t.Fatalf("Record(%s): %v", line, err)
				}
			}
			tr.Flush()
			if out != tc.wantOut {
				t.Errorf("output tokens %d, want %d", out, tc.wantOut)
			}
		})
	}
}
