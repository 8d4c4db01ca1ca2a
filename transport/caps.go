package transport

import (
	"strings"
	"unicode/utf8"

	"github.com/llmtrace/llmtrace/otelstats"
)

// A string an update carries from outside is cut, never refused: the
// tracker cuts the model, names and stop sequences at its own caps and
// counts the cut, and rejects a scope or kv_source over its cap as
// too_long, so a long string must cost the string, not the update (an
// ARRIVED with a 5,000-byte model was its whole request). Cutting here, at
// four times the tracker's cap, keeps what waits in the collector's queue
// and what a Producer writes small, and leaves every string the tracker
// would cut or reject still too long for it: it decides, cuts on its own
// UTF-8 boundary and counts as it does in process.
const (
	// maxString bounds every string field but the request id (refused
	// above otelstats.MaxIDLength: cutting an identity could merge two
	// requests) and the trace context (parsed, not kept).
	maxString = 4 * otelstats.MaxModelLength
	// maxStopString and maxStops bound the stop sequences: one more than
	// the tracker keeps, so it still sees the list too long and counts it.
	maxStopString = 4 * otelstats.MaxStopLength
	maxStops      = otelstats.MaxStopSequences + 1
)

// capStrings cuts u's strings at the bounds above and reports whether it
// changed any. u.Sampling is replaced by a copy before it is changed: it
// may be the caller's.
func capStrings(u *otelstats.Update) bool {
	changed := false
	for _, s := range [...]*string{&u.Model, &u.Operation, &u.Scope, &u.FinishReason, &u.ErrorType,
		&u.PDRole, &u.KVSource, &u.KVStatus, &u.LoRAAdapter} {
		if len(*s) > maxString {
			*s = cut(*s, maxString)
			changed = true
		}
	}
	if u.Sampling != nil && stopsTooLong(u.Sampling.Stop) {
		sp := *u.Sampling
		sp.Stop = make([]string, min(len(sp.Stop), maxStops))
		for i := range sp.Stop {
			sp.Stop[i] = cut(u.Sampling.Stop[i], maxStopString)
		}
		u.Sampling = &sp
		changed = true
	}
	return changed
}

func stopsTooLong(stops []string) bool {
	if len(stops) > maxStops {
		return true
	}
	for _, s := range stops {
		if len(s) > maxStopString {
			return true
		}
	}
	return false
}

// cut is a copy of s cut to at most n bytes, not inside a UTF-8 sequence
// when s is UTF-8 there. It walks back at most one sequence: a run of
// invalid bytes must not shrink the string under the tracker's cap (it
// replaces them by U+FFFD), nor to nothing (a model is required). The copy
// lets a long original go.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	end := n
	for i := n; i > n-utf8.UTFMax && i > 0; i-- {
		if utf8.RuneStart(s[i]) {
			end = i
			break
		}
	}
	return strings.Clone(s[:end])
}
