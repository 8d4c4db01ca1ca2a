package reconstruct

import "time"

// Stats are the durations of SPEC §2, derived from a Request's instants
// exactly as the tracker derives them from lifecycle updates. A duration
// whose instants the span does not show is absent (its Has bit unset),
// never zero.
type Stats struct {
	E2E, TTFT, Queue, Prefill, Decode, Inference, TPOT time.Duration
	Has                                                Has
}

// Has says which Stats durations are present.
type Has uint8

// The bits of Has.
const (
	HasTTFT Has = 1 << iota
	HasQueue
	HasPrefill
	HasDecode
	HasInference
	HasTPOT
)

// Stats derives the request's durations: e2e = FINISHED − ARRIVED, TTFT =
// first token − ARRIVED, queue = PREFILLING − QUEUED, prefill = first token
// − PREFILLING, decode = FINISHED − first token, inference = FINISHED −
// PREFILLING, TPOT = decode / (output tokens − 1) for more than one token
// of one sequence.
func (r *Request) Stats() Stats {
	s := Stats{E2E: r.Finished.Sub(r.Arrived)}
	if !r.FirstToken.IsZero() {
		s.TTFT, s.Decode = r.FirstToken.Sub(r.Arrived), r.Finished.Sub(r.FirstToken)
		s.Has |= HasTTFT | HasDecode
		// Several sequences' summed tokens were generated side by side:
		// decode / (sum − 1) is no sequence's time per token.
		if r.OutputTokens > 1 && r.Sequences <= 1 {
			s.TPOT = s.Decode / time.Duration(r.OutputTokens-1)
			s.Has |= HasTPOT
		}
	}
	if !r.Prefilling.IsZero() {
		s.Inference = r.Finished.Sub(r.Prefilling)
		s.Has |= HasInference
		if !r.Queued.IsZero() {
			s.Queue = r.Prefilling.Sub(r.Queued)
			s.Has |= HasQueue
		}
		if !r.FirstToken.IsZero() {
			s.Prefill = r.FirstToken.Sub(r.Prefilling)
			s.Has |= HasPrefill
		}
	}
	return s
}
