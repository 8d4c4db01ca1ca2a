package otelstats

import (
	"context"
	"errors"
	"testing"

	"github.com/llmtrace/llmtrace/attributes"
)

// SPEC §8 with §1's optional num_new_tokens: a speculative DECODING that
// does not say how many tokens its step yielded yielded the accepted draft
// tokens and the target's own one, accepted + 1, as a vLLM or SGLang step
// does; an explicit count is taken as given and checked against accepted.
// Every way of recording the step gives the same counts.
func TestSpeculativeStepWithoutNewTokens(t *testing.T) {
	cases := []struct {
		name                    string
		newTokens, draft, acc   int
		wantOut                 int    // the request's output tokens: the first one + the step's
		wantReject              Reason // "" for accepted
		wantAccepted, wantSteps int
	}{
		{name: "accepted 3 of 4, no count", draft: 4, acc: 3, wantOut: 5, wantAccepted: 3, wantSteps: 1},
		{name: "all 4 accepted, no count", draft: 4, acc: 4, wantOut: 6, wantAccepted: 4, wantSteps: 1},
		{name: "none accepted, no count", draft: 4, acc: 0, wantOut: 2, wantSteps: 1},
		{name: "past position 15, no count", draft: 20, acc: 17, wantOut: 19, wantAccepted: 17, wantSteps: 1},
		{name: "an explicit count is taken as given", newTokens: 3, draft: 4, acc: 2, wantOut: 4, wantAccepted: 2, wantSteps: 1},
		{name: "an explicit count below accepted is rejected", newTokens: 1, draft: 4, acc: 2, wantOut: 1,
			wantReject: ReasonAcceptedExceedsNewTokens},
		{name: "accepted > draft is rejected", draft: 2, acc: 3, wantOut: 1, wantReject: ReasonAcceptedExceedsDraft},
	}
	paths := []struct {
		name   string
		record func(h *harness, q *Request, newTokens, draft, acc int) error
	}{
		{"update", func(h *harness, _ *Request, n, d, a int) error {
			return h.tr.Record(specDecoding("r", 20, n, d, a))
		}},
		{"step by handle", func(h *harness, q *Request, n, d, a int) error {
			return h.tr.Step(&Step{Time: at(20), SpecDecoded: []SpecDecoded{{Req: q, NewTokens: n, DraftTokens: d, AcceptedTokens: a}}})
		}},
		{"step by id", func(h *harness, _ *Request, n, d, a int) error {
			return h.tr.Step(&Step{Time: at(20), SpecDecoded: []SpecDecoded{{RequestID: "r", NewTokens: n, DraftTokens: d, AcceptedTokens: a}}})
		}},
	}
	for _, tc := range cases {
		for _, p := range paths {
			t.Run(tc.name+"/"+p.name, func(t *testing.T) {
				h := newHarness(t)
				q, err := h.tr.Arrive(context.Background(), "r", Arrival{Time: at(0), Model: "m", Operation: "chat"})
				if err != nil {
					t.Fatal(err)
				}
				h.feed([]Update{queued("r", 1), prefilling("r", 2, 10, 0), decoding("r", 10, 1)})
				err = p.record(h, q, tc.newTokens, tc.draft, tc.acc)
				if tc.wantReject == "" && err != nil {
					t.Fatalf("rejected: %v", err)
				}
				if tc.wantReject != "" && !errors.Is(err, tc.wantReject) {
					t.Fatalf("err = %v, want %s", err, tc.wantReject)
				}
				h.must(enFinished("r", 30, "stop"))
				s := h.statsOf("r")
				if s.NumOutputTokens != tc.wantOut || s.NumAcceptedTokens != tc.wantAccepted || s.NumSpecSteps != tc.wantSteps {
					t.Errorf("output %d, accepted %d, steps %d; want %d, %d, %d", s.NumOutputTokens, s.NumAcceptedTokens,
						s.NumSpecSteps, tc.wantOut, tc.wantAccepted, tc.wantSteps)
				}
				h.wantCounter(attributes.MetricGenerationTokens, int64(tc.wantOut))
			})
		}
	}
}
