package otelstats

import (
	"math"
	"strconv"
	"time"
)

// allowed[side][kind] is the set of previous kinds on that side from which
// kind may follow (SPEC §1, §7). Bit 0 stands for "nothing yet". ENCODING
// and ENCODED are not in it: an encoder run brackets part of the engine's
// life without changing its state (see admitEncoder).
var allowed = func() (a [3][kindCount]uint16) {
	bit := func(ks ...Kind) (b uint16) {
		for _, k := range ks {
			b |= 1 << k
		}
		return b
	}
	const none = 0
	a[SideFrontend][KindInputProcessed] = bit(KindArrived)
	a[SideFrontend][KindDetokenized] = bit(KindArrived, KindInputProcessed, KindDetokenized)
	a[SideFrontend][KindFinished] = bit(KindArrived, KindInputProcessed, KindDetokenized)
	a[SideEngine][KindQueued] = bit(none)
	a[SideEngine][KindRemoteKVWait] = bit(KindQueued)
	a[SideEngine][KindRemoteKVReady] = bit(KindRemoteKVWait)
	a[SideEngine][KindPrefilling] = bit(KindQueued, KindPrefilling, KindPreempted, KindRemoteKVReady)
	a[SideEngine][KindDecoding] = bit(KindPrefilling, KindDecoding)
	a[SideEngine][KindPreempted] = bit(KindPrefilling, KindDecoding)
	a[SideEngine][KindFinished] = bit(none, KindQueued, KindPrefilling, KindDecoding, KindPreempted,
		KindRemoteKVWait, KindRemoteKVReady)
	return a
}()

// encoderStates are the engine states an encoder run may start in: before
// or during prefill (SPEC §9). Its ENCODED may come in any state but
// FINISHED (see admitMove and encEnd).
var encoderStates = uint16(1<<0 | 1<<KindQueued | 1<<KindRemoteKVWait | 1<<KindRemoteKVReady | 1<<KindPrefilling | 1<<KindPreempted)

// apply checks u against r's state and, when it is allowed, applies it. It
// reports whether r is now complete (to be finalized). Called with r.mu
// held.
func (t *Tracker) apply(r *reqState, u *Update, side Side, ns int64) (bool, *RejectError) {
	st := &r.fe
	if side == SideEngine {
		st = &r.en
	}
	if rerr := t.admit(r, st, u, side, ns); rerr != nil {
		return false, rerr
	}
	prev := st.last
	if u.Kind != KindEncoding && u.Kind != KindEncoded {
		st.last = u.Kind
	}
	st.time = ns
	now := t.now(ns)
	r.touched = max(r.touched, now)
	t.saw(side, now)
	if side == SideFrontend {
		r.feReported = true
	}
	if u.Kind == KindFinished {
		return t.finished(r, u, side, now), nil
	}
	t.applyKind(r, u, ns, prev)
	if side == SideEngine {
		t.settleDeliveries(r, ns)
	}
	return false, nil
}

// admit checks u against r's state: the side's lifecycle, its time order,
// and the rules that depend on what the request reported before.
func (t *Tracker) admit(r *reqState, st *sideState, u *Update, side Side, ns int64) *RejectError {
	if st.last == KindFinished {
		return reject(u, side, ReasonAfterFinished, "the "+side.String()+" already reported FINISHED")
	}
	if u.Kind == KindRemoteKVWait && r.kv() != nil {
		return reject(u, side, ReasonDuplicateTransfer, "the request's KV cache was already transferred")
	}
	if rerr := admitMove(r, st, u, side); rerr != nil {
		return rerr
	}
	if ns < st.time {
		return reject(u, side, ReasonTimeBackwards,
			"at "+time.Duration(st.time-ns).String()+" before the side's previous update")
	}
	return t.stateRules(r, u, side, ns)
}

// admitMove checks that u's kind may follow the side's previous one.
func admitMove(r *reqState, st *sideState, u *Update, side Side) *RejectError {
	prev := "nothing"
	if st.last != 0 {
		prev = st.last.String()
	}
	switch u.Kind {
	case KindEncoding, KindEncoded:
		open := r.encOpen()
		switch {
		case encoderMoves(st.last, u.Kind, open):
		case encoderStates&(1<<st.last) == 0:
			return reject(u, side, ReasonBadTransition, u.Kind.String()+" after "+prev+": an encoder runs before or during prefill")
		case u.Kind == KindEncoding && open:
			return reject(u, side, ReasonBadTransition, "ENCODING while an encoder run is open")
		case u.Kind == KindEncoded && !open:
			return reject(u, side, ReasonBadTransition, "ENCODED without ENCODING")
		}
		return nil
	}
	if allowed[side][u.Kind]&(1<<st.last) == 0 {
		return reject(u, side, ReasonBadTransition, u.Kind.String()+" after "+prev)
	}
	return nil
}

// stateRules are the payload rules that depend on the request's earlier
// updates (SPEC §1, §7); ns is u's time.
func (t *Tracker) stateRules(r *reqState, u *Update, side Side, ns int64) *RejectError {
	switch u.Kind {
	case KindPrefilling:
		// The first run's PREFILLINGs come before any token (an engine
		// decodes only after one, and a further chunk follows a
		// PREFILLING): they are bounded by the prompt alone, as
		// promptRules bounds them against a late prompt count. Frontend
		// deliveries that reached us first were made after them, and
		// those counted while the engine was not present have no kept
		// time (pendDelivery) for generatedAt to leave them out by.
		var generated int64
		if len(r.runs) > 1 || len(r.runs) == 1 && r.en.last != KindPrefilling {
			generated = r.generatedAt(ns)
		}
		if r.prompt >= 0 && int64(u.NumComputedTokens) > int64(r.prompt)+generated {
			return reject(u, side, ReasonComputedExceedsTokens,
				strconv.Itoa(u.NumComputedTokens)+" computed > "+strconv.Itoa(int(r.prompt))+" prompt + "+strconv.FormatInt(generated, 10)+" generated")
		}
		if kv := r.kv(); kv != nil && len(r.runs) == 0 && !kv.failed && kv.ready != 0 &&
			int64(kv.tokens)+int64(u.NumCachedTokens) > int64(u.NumComputedTokens) {
			return reject(u, side, ReasonRemoteExceedsComputed, strconv.Itoa(int(kv.tokens))+" remote + "+
				strconv.Itoa(u.NumCachedTokens)+" cached > "+strconv.Itoa(u.NumComputedTokens)+" computed")
		}
	case KindDecoding, KindPreempted:
		if side == SideEngine && len(r.runs) == 0 {
			return reject(u, side, ReasonBadTransition, u.Kind.String()+" before any PREFILLING")
		}
	case KindRemoteKVWait, KindRemoteKVReady:
		if r.prompt >= 0 && u.NumRemoteTokens > int(r.prompt) {
			return reject(u, side, ReasonRemoteExceedsPrompt,
				strconv.Itoa(u.NumRemoteTokens)+" remote > "+strconv.Itoa(int(r.prompt))+" prompt tokens")
		}
	case KindInputProcessed:
		return promptRules(r, u, side)
	case KindFinished:
		if r.prompt < 0 && u.NumPromptTokens > 0 { // the count FINISHED would set
			return promptRules(r, u, side)
		}
	}
	return nil
}

// generatedAt is how many tokens the request had generated by ns, what a
// PREFILLING at ns is checked against: the engine's count (its stream is in
// order, so all of it came before ns), or the frontend's deliveries but
// those kept aside with a later time (pendDelivery): when the engine's
// stream runs behind they reach us first, yet came after (SPEC §1: late
// updates apply as if in time order).
func (r *reqState) generatedAt(ns int64) int64 {
	fe := r.feTokens
	if r.pending {
		for _, d := range r.extra.pending {
			if d.time > ns {
				fe -= int64(d.n)
			}
		}
	}
	return max(r.enTokens, fe)
}

// promptRules check a prompt count that comes after engine updates it
// bounds (the two sides' streams travel apart, SPEC §1): in time order those
// would have been checked against it, so the count must admit what they
// reported — remote ≤ prompt (§7), and each run's computed ≤ prompt + the
// tokens generated before that run (§1), which is what its PREFILLINGs
// were checked against: the first run's, before any token, by the prompt
// alone. Against the tokens generated by now, a long output let a small
// count through, and the request ended with more cached than prompt tokens.
func promptRules(r *reqState, u *Update, side Side) *RejectError {
	prompt := u.NumPromptTokens
	if kv := r.kv(); kv != nil && int(kv.tokens) > prompt {
		return reject(u, side, ReasonRemoteExceedsPrompt,
			strconv.Itoa(int(kv.tokens))+" remote > "+strconv.Itoa(prompt)+" prompt tokens")
	}
	var enBefore, feBefore int64 // the tokens of the runs before run i
	for i := range r.runs {
		ri := &r.runs[i]
		generated := max(enBefore, feBefore)
		if i == maxRuns-1 {
			// Later runs merged into this one: its computed may count
			// tokens of its own (applyPrefill).
			generated = max(r.enTokens, r.feTokens)
		}
		if int64(ri.computed) > int64(prompt)+generated {
			return reject(u, side, ReasonComputedExceedsTokens, strconv.Itoa(prompt)+" prompt + "+
				strconv.FormatInt(generated, 10)+" generated before run "+strconv.Itoa(i)+" < "+
				strconv.Itoa(int(ri.computed))+" computed already reported")
		}
		enBefore, feBefore = enBefore+ri.enTokens, feBefore+ri.feTokens
	}
	return nil
}

// applyKind applies an accepted update of any kind but FINISHED.
func (t *Tracker) applyKind(r *reqState, u *Update, ns int64, prev Kind) {
	switch u.Kind {
	case KindInputProcessed:
		r.inputProcessed = ns
		r.prompt = int32(u.NumPromptTokens)
		if !u.Sampling.IsZero() {
			sp := *u.Sampling // the caller may reuse its value
			sp.Stop = t.capStops(sp.Stop)
			r.ext().sampling = &sp
		}
	case KindQueued:
		if r.firstQueued == 0 {
			r.firstQueued = ns
		}
	case KindPrefilling:
		t.applyPrefill(r, u, ns, prev == KindPrefilling)
	case KindDecoding:
		r.sh.genTok.Add(t.decoded(r, decodeTokens(u.NumNewTokens, u.NumDraftTokens, u.NumAcceptedTokens), ns, u.step, u.batch))
		if u.NumDraftTokens > 0 {
			t.specStep(r, u.NumDraftTokens, u.NumAcceptedTokens)
		}
	case KindPreempted:
		r.preemptions++
		r.curRun().end = ns
		r.sh.preempts.Add(1)
	case KindDetokenized:
		t.delivered(r, u.NumNewTokens, u.Busy, ns)
	case KindRemoteKVWait:
		r.ext().kv = &kvState{source: u.KVSource, wait: ns, tokens: int32(u.NumRemoteTokens)}
	case KindRemoteKVReady:
		t.kvReady(r, u, ns)
	case KindEncoding:
		r.ext().encoder().begin(ns, u.NumItems, u.NumEncoderTokens)
	case KindEncoded:
		r.extra.enc.end(r.encEnd(ns), r.arrived, u.EncoderCacheHit)
	}
}

// finished applies a FINISHED and reports whether the request is complete.
func (t *Tracker) finished(r *reqState, u *Update, side Side, now int64) bool {
	if side == SideFrontend {
		ns := r.fe.time
		r.feFinish, r.feReason = ns, u.FinishReason
		if u.ErrorType != "" {
			r.errorType = u.ErrorType
		}
		if u.NumOutputTokens > 0 {
			r.feOneShot = int32(u.NumOutputTokens)
		}
		if len(u.FinishReasons) > 0 {
			r.ext().finishReasons = t.capFinishReasons(u.FinishReasons)
		}
	} else {
		ns := r.en.time
		r.enFinish, r.enReason = ns, u.FinishReason
		if r.errorType == "" {
			r.errorType = u.ErrorType
		}
		t.settleDeliveries(r, math.MaxInt64)
	}
	if r.prompt < 0 && u.NumPromptTokens > 0 {
		r.prompt = int32(u.NumPromptTokens)
	}
	if t.waitForOther(r, side, now) {
		r.waitUntil = now + int64(t.cfg.frontendGrace)
		r.sh.dueBy(r.waitUntil)
		return false
	}
	return true
}

// waitForOther reports whether a request that side has just finished stays
// open for the other side's updates (SPEC §1): the other side has not
// finished it, and it has reported for this request (the frontend: more
// than ARRIVED) or is present now — its updates may be on their way in a
// stream of their own. The frontend has also reported when engine updates
// reached the tracker before its ARRIVED (applyHeld).
func (t *Tracker) waitForOther(r *reqState, side Side, now int64) bool {
	if t.cfg.frontendGrace <= 0 {
		return false
	}
	if side == SideFrontend {
		return r.enFinish == 0 && (r.en.last != 0 || t.present(SideEngine, now))
	}
	return r.feFinish == 0 && (r.feReported || r.feBehind || t.present(SideFrontend, now))
}

// applyPrefill starts a run after QUEUED or PREEMPTED, or adds a chunk to
// the current one.
func (t *Tracker) applyPrefill(r *reqState, u *Update, ns int64, chunk bool) {
	computed, cached := int32(u.NumComputedTokens), int32(u.NumCachedTokens)
	cr := r.curRun()
	var prev int32
	if !chunk {
		if cr != nil && cr.end != 0 {
			r.preemptedNs += ns - cr.end
		}
		if len(r.runs) == 0 {
			r.firstPrefill = ns
			r.cached = cached
		} else {
			r.recomputeCached += int64(cached)
		}
		if len(r.runs) < maxRuns {
			r.runs = append(r.runs, run{start: ns, computed: computed, cached: cached, chunks: 1})
		} else {
			// Past the cap, further runs merge into the last one.
			cr.end = 0
			cr.chunks++
			cr.computed = max(cr.computed, computed)
		}
		prev = cached
		if kv := r.kv(); len(r.runs) == 1 && kv != nil && !kv.failed {
			// The transferred tokens were computed on the prefill
			// instance: not this one's prompt throughput (SPEC §7).
			prev += kv.tokens
		}
	} else {
		prev = cr.computed
		cr.chunks++
		if computed > cr.computed {
			cr.computed = computed
		}
		if len(cr.events) < maxChunkEvents {
			cr.events = append(cr.events, chunkEvent{time: ns, computed: computed})
		}
	}
	if d := computed - prev; d > 0 {
		r.sh.promptTok.Add(int64(d))
	}
}

// decoded applies the engine's DECODING of n tokens (0 means 1) and returns
// how many of them count as newly generated for the stats log. The caller
// has checked the transition and set r.en.
func (t *Tracker) decoded(r *reqState, n int, ns, step int64, batch int32) int64 {
	n = max(n, 1)
	cr := &r.runs[len(r.runs)-1]
	if cr.enFirst == 0 {
		cr.enFirst = ns
	}
	cr.enTokens += int64(n)
	r.enTokens += int64(n)
	if r.enDeliv > 0 {
		gap := ns - r.enLast
		if r.feDeliv == 0 {
			// The engine's gaps count only until the frontend
			// delivers: from then on the frontend's are the ITL.
			if h := &r.itl; h.fits(gap) { // adding a gap (itlHist)
				h.count(gap)
			} else {
				h.move(gap)
			}
		}
		if t.cfg.tokenLatencies {
			x := r.ext()
			x.enITLs = append(x.enITLs, time.Duration(gap))
		}
	} else {
		r.enFirst = ns
	}
	r.enDeliv++
	r.enLast = ns
	if r.detail >= DetailSteps {
		if x := r.ext(); len(x.steps) < maxDetailRecords {
			x.steps = append(x.steps, stepRec{time: ns, index: step, batch: batch, run: int32(len(r.runs) - 1)})
		}
	}
	// Tokens the frontend's deliveries already counted are not counted
	// again.
	if r.pending {
		// The engine's updates reached ns: every run that began by then
		// is known.
		t.settleDeliveries(r, ns)
	}
	if r.genCredit == 0 {
		return int64(n)
	}
	c := min(r.genCredit, int64(n))
	r.genCredit -= c
	return int64(n) - c
}

// delivered applies the frontend's DETOKENIZED of n tokens. The caller has
// checked the transition and set r.fe.
func (t *Tracker) delivered(r *reqState, n int, busy time.Duration, ns int64) {
	if r.detokCount == 0 {
		r.detokFirst = ns
	}
	r.detokCount++
	r.detokLast = ns
	r.detokBusy = min(r.detokBusy+int64(busy), math.MaxInt64-int64(maxBusy)) // never wraps
	if n == 0 {
		return
	}
	if r.feDeliv > 0 {
		gap := ns - r.feLast
		if h := &r.itl; h.fits(gap) { // adding a gap (itlHist)
			h.count(gap)
		} else {
			h.move(gap)
		}
		if t.cfg.tokenLatencies {
			x := r.ext()
			x.feITLs = append(x.feITLs, time.Duration(gap))
		}
	} else {
		r.feFirst = ns
		r.itl = itlHist{} // frontend tokens decide: drop the engine's gaps
	}
	r.feDeliv++
	r.feLast = ns
	r.feTokens += int64(n)
	if r.detail >= DetailTokens {
		if x := r.ext(); len(x.deliveries) < maxDetailRecords {
			x.deliveries = append(x.deliveries, ns)
		}
	}
	if t.pendDelivery(r, ns, n) {
		// Its run may not be known yet: attributed when the engine's
		// updates catch up with it (settleDeliveries).
	} else {
		r.attribute(ns, r.feTokens-int64(n), int32(n))
	}
	if r.en.last == 0 {
		// No engine update has reached us: the frontend's tokens are the
		// generation throughput, and a credit against the engine's
		// DECODINGs should they come after all (SPEC §1: any order).
		r.sh.genTok.Add(int64(n))
		r.genCredit += int64(n)
	}
}

// maxPending bounds the frontend deliveries a request keeps while its
// engine's updates lag behind them; past it, deliveries are attributed to
// the runs known so far.
const maxPending = 256

// delivery is a frontend delivery whose run is not known yet: n tokens at
// time, the first of them the idx-th (from 0) the frontend delivered.
type delivery struct {
	time, idx int64
	n         int32
}

// pendDelivery keeps a delivery of n tokens at ns aside when the engine's
// updates may still bring the run it belongs to: the two sides' streams
// travel separately (SPEC §1), and when the engine's lags, a delivery can
// reach us before the DECODING that made its tokens. That is the case
// while the frontend has delivered more tokens than the engine reported,
// the engine has not finished or reached ns, and it reports for this
// request or is present. It reports whether it kept the delivery.
func (t *Tracker) pendDelivery(r *reqState, ns int64, n int) bool {
	x := r.extra
	if !r.pending {
		if r.feTokens <= r.enTokens || r.enFinish != 0 || ns <= r.en.time {
			return false
		}
		if r.en.last == 0 && !t.present(SideEngine, t.now(ns)) {
			return false
		}
		x = r.ext()
	}
	if len(x.pending) >= maxPending {
		return false
	}
	x.pending = append(x.pending, delivery{time: ns, idx: r.feTokens - int64(n), n: int32(n)})
	r.pending = true
	return true
}

// settleDeliveries attributes the kept deliveries whose tokens the engine
// has counted, and those up to upto, the time of the engine's latest
// update: every run that began by then is known.
func (t *Tracker) settleDeliveries(r *reqState, upto int64) {
	if !r.pending {
		return
	}
	x := r.extra
	i := 0
	for ; i < len(x.pending); i++ {
		d := &x.pending[i]
		if d.time > upto && d.idx+int64(d.n) > r.enTokens {
			break
		}
		r.attribute(d.time, d.idx, d.n)
	}
	x.pending = append(x.pending[:0], x.pending[i:]...)
	r.pending = len(x.pending) > 0
}

// attribute gives a delivery of n tokens at ns, the first of them the
// idx-th delivered, to the runs whose engine counted them: a delivery
// belongs to the run that made its tokens, even when a preemption and a
// resume came before it was delivered (and the same whatever order the two
// sides' updates arrive in, SPEC §1). Tokens beyond the engine's count go
// to the last run started at or before ns, or to the time before any run.
func (r *reqState) attribute(ns, idx int64, n int32) {
	left := int64(n)
	if idx < r.enTokens {
		// The engine's runs before j hold tokens [0, start).
		j := len(r.runs) - 1
		start := r.enTokens - r.runs[j].enTokens
		for j > 0 && idx < start {
			j--
			start -= r.runs[j].enTokens
		}
		for ; j < len(r.runs) && left > 0 && idx < r.enTokens; j++ {
			rj := &r.runs[j]
			c := min(left, start+rj.enTokens-idx)
			start += rj.enTokens
			if c <= 0 {
				continue
			}
			if rj.feFirst == 0 {
				rj.feFirst = ns
			}
			rj.feTokens += c
			left -= c
			idx += c
		}
		if left == 0 {
			return
		}
	}
	if cr := r.runAt(ns); cr != nil {
		if cr.feFirst == 0 {
			cr.feFirst = ns
		}
		cr.feTokens += left
		return
	}
	r.preRunFE += left
}
