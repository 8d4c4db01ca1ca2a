package reconstruct

import (
	"math"
	"strings"
	"time"
)

// Latency holds a span's gen_ai.latency.* values in seconds; NaN marks a
// key the span does not carry (NoLatency is all NaN).
type Latency struct {
	TTFT, E2E, Queue, Prefill, Decode, Inference float64
}

// NoLatency returns a Latency with every key absent.
func NoLatency() Latency {
	n := math.NaN()
	return Latency{n, n, n, n, n, n}
}

// Span is what reconstruction reads from an engine's request span, as
// plain data (FromAttributes fills it from OpenTelemetry attributes). The
// zero Span has no usable keys.
type Span struct {
	Name  string // the span's name, e.g. llm_request
	Scope string // its instrumentation scope's name
	// Start and End are the span's own timestamps.
	Start, End time.Time
	Latency    Latency
	// Token counts; -1 when the span does not say.
	InputTokens, OutputTokens, CachedTokens int
	// Operation, Model and FinishReason as the span gives them (empty when
	// absent); bounded to MaxNameLength bytes on a rune boundary, invalid
	// UTF-8 replaced, by FromAttributes.
	Operation, Model, FinishReason string
	// Provider is the span's gen_ai.provider.name (empty when absent).
	Provider string
	// PDRole and LoRAAdapter are llmtrace's llm.pd.role and
	// llm.lora.adapter (SPEC §7, §9; empty when absent): PDRole only
	// "prefill" or "decode", LoRAAdapter bounded like Model.
	PDRole, LoRAAdapter string
	// Failed is an error status on the span.
	Failed bool
	// Preemptions is llmtrace's llm.preemptions (-1 when absent; engines
	// do not report it).
	Preemptions int
	// Sequences is vLLM V0's gen_ai.usage.num_sequences (0 or -1 when
	// absent): more than one, and OutputTokens is their sum.
	Sequences int

	// ownReason: FinishReason is llmtrace's llm.finish_reason (the
	// request's, with n > 1 the choice that finished last), which the
	// per-choice gen_ai.response.finish_reasons must not replace.
	ownReason bool
}

// Request is a rebuilt request: its lifecycle instants, each inside the
// span and in lifecycle order, zero when the span does not show it. It is
// plain data (the zero Request shows nothing); Compute makes one.
type Request struct {
	Engine  Engine
	Arrived time.Time // the span's start
	// InputDone ends input processing: QUEUED (vLLM V1), the hand-off to
	// the scheduler (SGLang); zero where the engine folds it into the
	// queue (vLLM V0, TensorRT-LLM).
	InputDone  time.Time
	Queued     time.Time // zero when the queue is not visible (SGLang)
	Prefilling time.Time // first PREFILLING
	FirstToken time.Time
	LastToken  time.Time // zero when the engine gives no decode time
	Finished   time.Time
	// End is the span's end, which bounds everything.
	End time.Time

	InputTokens, OutputTokens, CachedTokens, Preemptions int
	// Sequences as in Span: past one, OutputTokens sums them.
	Sequences                      int
	Operation, Model, FinishReason string
	// Provider is gen_ai.provider.name, which the conventions require on
	// the gen_ai.server.* metrics: the span's, else the engine's name.
	Provider            string
	PDRole, LoRAAdapter string
	Failed              bool
	// Clamped counts values that contradicted each other or were invalid
	// (clamped into the span, or dropped).
	Clamped int
}

// tolerance separates rounding (durations travel as float seconds) from a
// real contradiction.
const tolerance = time.Microsecond

func present(v float64) bool { return !math.IsNaN(v) }

// maxSeconds bounds a duration from outside: a century, far beyond any
// request, well inside time.Duration.
const maxSeconds = 100 * 365 * 24 * 3600

// duration converts one latency value, reporting whether it is usable.
// Negative, infinite and absurd values are invalid: counted unless the
// engine uses negatives for "unknown".
func (r *Request) duration(v float64) (time.Duration, bool) {
	if math.IsNaN(v) {
		return 0, false
	}
	if v < 0 && r.Engine.NegativeAbsent && !math.IsInf(v, 0) {
		return 0, false
	}
	if v < 0 || math.IsInf(v, 0) || v > maxSeconds {
		r.Clamped++
		return 0, false
	}
	return time.Duration(v * float64(time.Second)), true
}

// clamp moves t into [lo, hi], counting a move beyond rounding.
func (r *Request) clamp(t, lo, hi time.Time) time.Time {
	switch {
	case t.Before(lo):
		if lo.Sub(t) > tolerance {
			r.Clamped++
		}
		return lo
	case t.After(hi):
		if t.Sub(hi) > tolerance {
			r.Clamped++
		}
		return hi
	}
	return t
}

// firstInstant and lastInstant bound the span times Compute accepts: the
// children travel as Unix nanoseconds in an int64 (spans.Tree), 0 meaning
// "never happened", and leave as OTLP's unsigned ones. A span outside (a
// clock decades off, a pdata timestamp past 2262 read back wrapped into
// 1677–1970) would get children in another century, or collapsed onto its
// start with spurious clamps.
var firstInstant, lastInstant = time.Unix(0, 1), time.Unix(0, math.MaxInt64)

// representable reports whether t lies in [firstInstant, lastInstant]; the
// zero Time (no timestamp) does not.
func representable(t time.Time) bool {
	return !t.Before(firstInstant) && !t.After(lastInstant)
}

// Compute rebuilds the request of s under engine e. It reports false, and
// s should pass untouched, when s has no start or end, one outside
// 1970–2262 (representable), or none of the keys the instants hang on (a
// usable time_to_first_token, e2e or time_in_queue).
// Compute does not allocate; it never panics on any input.
func Compute(s *Span, e Engine) (Request, bool) {
	r := Request{
		Engine: e, InputTokens: s.InputTokens, OutputTokens: s.OutputTokens,
		CachedTokens: s.CachedTokens, Preemptions: s.Preemptions, Sequences: s.Sequences,
		Operation: s.Operation, Model: s.Model, FinishReason: s.FinishReason, Failed: s.Failed,
		Provider: s.Provider, PDRole: s.PDRole, LoRAAdapter: s.LoRAAdapter,
	}
	if r.Provider == "" {
		r.Provider = e.Name
	}
	if r.PDRole == "" {
		r.PDRole = roleFromName(s.Name)
	}
	if !representable(s.Start) || !representable(s.End) {
		return r, false
	}
	if r.InputTokens >= 0 && r.CachedTokens > r.InputTokens {
		// More cached than prompt tokens contradicts SPEC §1 (cached ≤
		// computed ≤ prompt), which the tracker rejects: kept, the
		// rebuilt prefill would say it read more from the cache than it
		// computed. The cached count is dropped, and counted.
		r.CachedTokens = -1
		r.Clamped++
	}
	ttft, hasTTFT := r.duration(s.Latency.TTFT)
	if hasTTFT && ttft == 0 && e.ZeroTTFTAbsent {
		hasTTFT = false
	}
	e2e, hasE2E := r.duration(s.Latency.E2E)
	queue, hasQueue := r.duration(s.Latency.Queue)
	prefill, hasPrefill := r.duration(s.Latency.Prefill)
	decode, hasDecode := r.duration(s.Latency.Decode)
	inference, hasInference := r.duration(s.Latency.Inference)
	if !hasTTFT && !hasE2E && !hasQueue {
		return r, false
	}

	start, end := s.Start, s.End
	if end.Before(start) {
		r.Clamped++
		end = start
	}
	r.Arrived, r.End, r.Finished = start, end, end
	if hasE2E {
		r.Finished = r.clamp(start.Add(e2e), start, end)
	}
	fin := r.Finished
	if hasTTFT {
		r.FirstToken = r.clamp(start.Add(ttft), start, fin)
	}
	r.placeScheduling(e, start, latencies{
		queue: queue, prefill: prefill, inference: inference,
		hasQueue: hasQueue, hasPrefill: hasPrefill, hasInference: hasInference,
	})
	ft := r.FirstToken
	if !ft.IsZero() && hasDecode {
		r.LastToken = r.clamp(ft.Add(decode), ft, fin)
	}
	return r, true
}

// roleFromName is the P/D role SGLang writes in its root span's name, not
// in llm.pd.role: "prefill Req <rid>", "decode Req <rid>" (a unified
// instance's is " Req <rid>"); "" for any other name.
func roleFromName(name string) string {
	for _, role := range [...]string{"prefill", "decode"} {
		if strings.HasPrefix(name, role) && strings.HasPrefix(name[len(role):], " Req ") {
			return role
		}
	}
	return ""
}

// latencies are the span's scheduling durations Compute read, each with
// whether the span had it.
type latencies struct {
	queue, prefill, inference          time.Duration
	hasQueue, hasPrefill, hasInference bool
}

// placeScheduling sets Prefilling, Queued and InputDone, which hang on the
// arrival, first token and finish Compute already placed, in the way
// engine e measures its queue and prefill times.
func (r *Request) placeScheduling(e Engine, start time.Time, l latencies) {
	ft, fin := r.FirstToken, r.Finished
	switch {
	case e.QueueFromArrival:
		if l.hasQueue {
			r.Queued = start
			hi := fin
			if !ft.IsZero() {
				hi = ft
			}
			r.Prefilling = r.clamp(start.Add(l.queue), start, hi)
		}
		return
	case !ft.IsZero() && l.hasPrefill:
		r.Prefilling = r.clamp(ft.Add(-l.prefill), start, ft)
	case ft.IsZero() && l.hasInference && !e.ZeroTTFTAbsent:
		// No first token (an abort during prefill): inference = FINISHED −
		// PREFILLING (SGLang: − the dispatch, both its tokenizer's clock)
		// still places the scheduling.
		r.Prefilling = r.clamp(fin.Add(-l.inference), start, fin)
	}
	if r.Prefilling.IsZero() {
		return
	}
	if e.PrefillFromDispatch {
		r.InputDone = r.Prefilling
	} else if l.hasQueue {
		r.Queued = r.clamp(r.Prefilling.Add(-l.queue), start, r.Prefilling)
		r.InputDone = r.Queued
	}
}
