package otelstats

import (
	"github.com/llmtrace/llmtrace/attributes"
)

// What SPEC §7–9 add to a request's state: a KV transfer, speculative
// steps, encoder runs. Kept behind reqExtra pointers, so a request that uses
// none of them pays nothing.

// kvState is a decode instance's KV transfer (SPEC §7).
type kvState struct {
	source      string
	wait, ready int64 // REMOTE_KV_WAIT and REMOTE_KV_READY; ready 0 while waiting
	tokens      int32 // num_remote_tokens
	bytes       int64
	failed      bool
}

// kv is r's transfer, or nil.
func (r *reqState) kv() *kvState {
	if r.extra == nil {
		return nil
	}
	return r.extra.kv
}

// kvReady applies a REMOTE_KV_READY.
func (t *Tracker) kvReady(r *reqState, u *Update, ns int64) {
	kv := r.extra.kv
	kv.ready = ns
	kv.tokens = int32(u.NumRemoteTokens)
	kv.bytes = u.KVBytes
	kv.failed = u.KVStatus == KVStatusFailed
}

// maxEncodeRuns bounds the encoder runs kept per request for spans; later
// runs still add to the request's encode time, clamped into the root as
// far as what is kept of them tells (encState.overflow).
const maxEncodeRuns = 8

// encRun is one encoder run.
type encRun struct {
	start, end    int64
	items, tokens int32
	hit           bool
}

// encState is a request's encoder runs (SPEC §9).
type encState struct {
	runs  []encRun // at most maxEncodeRuns
	open  bool
	start int64 // of the open run
	// total sums the closed runs past maxEncodeRuns (runs has the others),
	// each from ARRIVED on; overStart is the first one's start, prevEnd
	// the end of the one before the last (the last one's start when there
	// is one), lastStart and lastEnd the last one's, all from ARRIVED on.
	// The request's end is not known yet: overflow clamps them to it.
	total, overStart, prevEnd, lastStart, lastEnd int64

	n   int32 // runs, all of them
	cur encRun
}

func (x *reqExtra) encoder() *encState {
	if x.enc == nil {
		x.enc = &encState{}
	}
	return x.enc
}

// encOpen reports whether an encoder run is open.
func (r *reqState) encOpen() bool {
	return r.extra != nil && r.extra.enc != nil && r.extra.enc.open
}

func (e *encState) begin(ns int64, items, tokens int) {
	e.open, e.start = true, ns
	e.cur = encRun{start: ns, items: int32(items), tokens: int32(tokens)}
}

// end closes the open run at ns; arrived is the request's ARRIVED.
func (e *encState) end(ns, arrived int64, hit bool) {
	e.open = false
	e.cur.end, e.cur.hit = ns, hit
	e.n++
	if len(e.runs) < maxEncodeRuns {
		e.runs = append(e.runs, e.cur)
		return
	}
	s, f := max(e.cur.start, arrived), max(ns, arrived)
	if e.n == maxEncodeRuns+1 {
		e.overStart, e.lastEnd = s, s
	}
	e.prevEnd, e.lastStart, e.lastEnd = e.lastEnd, s, f
	e.total += f - s
}

// overflow is the time of the runs past maxEncodeRuns within the root
// ending at hi (their part before ARRIVED was left out as they closed).
// Runs of one side come in time order, so what lies past hi is the tail:
// exact when no run or only the last one ends past hi; else at most the
// time from the first of them to hi.
func (e *encState) overflow(hi int64) int64 {
	switch {
	case e.n <= maxEncodeRuns || e.lastEnd <= hi:
		return e.total
	case e.prevEnd <= hi:
		return e.total - (e.lastEnd - max(e.lastStart, hi))
	}
	return min(e.total, max(hi-e.overStart, 0))
}

// encEnd is when the open encoder run ends that its ENCODED, or the
// request's end, closes at ns: by the first token the engine produced
// after the run began, at the latest. An encoder run feeds the prefill
// (SPEC §9: before or during it), which ends at its first token; the run
// must not stretch over the decode when its ENCODED comes after that token
// or never.
func (r *reqState) encEnd(ns int64) int64 {
	start := r.extra.enc.start
	for i := range r.runs {
		if f := r.runs[i].enFirst; f != 0 && f >= start {
			return max(min(ns, f), start)
		}
	}
	return ns
}

// closeAt ends an open run when the request ends without its ENCODED.
func (e *encState) closeAt(ns, arrived int64) {
	if e.open {
		e.end(max(ns, e.start), arrived, false)
	}
}

// specStep records one speculative decode step: draft tokens proposed,
// accepted of them (a prefix). checkSpec has validated the counts.
func (t *Tracker) specStep(r *reqState, draft, accepted int) {
	cr := &r.runs[len(r.runs)-1]
	cr.draft += int64(draft)
	cr.accepted += int64(accepted)
	cr.specSteps++
	x := r.ext()
	if x.positions == nil {
		x.positions = new([attributes.SpecPositions]int64)
	}
	last := attributes.SpecPositions - 1
	for i := range min(accepted, last) {
		x.positions[i]++
	}
	if accepted > last {
		x.positions[last] += int64(accepted - last) // positions 15 and up, in one add
	}
}
