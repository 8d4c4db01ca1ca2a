package otelstats

import (
	"errors"
	"time"
)

// Step is one engine scheduler step for many requests. An engine loop that
// schedules, runs the model and then processes outputs typically records
// two Steps: one at schedule time (Queued, Preempted, Scheduled) and one when
// the outputs are ready (Decoded, Finished, Stats); one Step with all of
// them works too, with a single time. Entries apply in the order Queued,
// Preempted, Scheduled, Decoded, Finished.
//
// The slices are read during the call only; an engine can reuse one Step
// value, truncating its slices each iteration, and record without
// allocating.
//
// Entries name their request by id or, cheaper, by the *Request handle
// Arrive returned (Req fields, QueuedReqs, PreemptedReqs): an engine that
// keeps the handle with its own request object skips the id lookup, and a
// decode token then costs a lock, a few stores and a histogram bucket.
type Step struct {
	Time time.Time
	// Scope and Model, when set, select among in-flight requests that share
	// an id (see "Request ids" in the package doc). Entries given by handle
	// need neither.
	Scope string
	Model string

	Queued        []string
	QueuedReqs    []*Request
	Preempted     []string
	PreemptedReqs []*Request
	Scheduled     []Scheduled
	Decoded       []Decoded
	SpecDecoded   []SpecDecoded
	Finished      []Finished
	Stats         *SchedulerStats
}

// Scheduled is a request scheduled to compute prompt tokens in a step: a new
// prefill, a further chunk, or a recompute after preemption (PREFILLING).
type Scheduled struct {
	// Req, when set, names the request; RequestID is then ignored.
	Req       *Request
	RequestID string
	// ComputedTokens is how many of the request's tokens will have been
	// computed once this chunk is done, counting prefix-cache hits.
	ComputedTokens int
	// CachedTokens is how many came from the prefix cache.
	CachedTokens int
}

// Decoded is a request that produced output tokens in a step (DECODING).
type Decoded struct {
	Req       *Request // when set, names the request; RequestID is ignored
	RequestID string
	NewTokens int // 0 means 1
}

// SpecDecoded is a request that produced output tokens in a speculative
// step (a DECODING with a draft, SPEC §8): the draft proposed DraftTokens,
// the target accepted the first AcceptedTokens of them, and the step
// yielded NewTokens (the accepted ones and the target's own; 0 means
// AcceptedTokens + 1, what such a step yields). It is a list
// of its own, not fields of Decoded, so that the decode tokens of engines
// that do not speculate pay nothing for it.
type SpecDecoded struct {
	Req                         *Request // when set, names the request; RequestID is ignored
	RequestID                   string
	NewTokens                   int // 0 means AcceptedTokens + 1
	DraftTokens, AcceptedTokens int
}

// Finished is a request the engine finished in a step.
type Finished struct {
	Req       *Request // when set, names the request; RequestID is ignored
	RequestID string
	Reason    string
	ErrorType string
}

// maxStepErrors bounds the rejections a Step returns in detail; all of them
// are counted.
const maxStepErrors = 8

// Step records one engine step. It never blocks on export and does not
// allocate per request or per token on the accepted path. It returns nil, or
// an error joining up to eight of the step's rejections (each a
// *RejectError); every rejection is counted.
func (t *Tracker) Step(s *Step) error {
	ns := t.ns(s.Time)
	var errs []error
	if len(s.Queued)+len(s.QueuedReqs)+len(s.Preempted)+len(s.PreemptedReqs)+len(s.Scheduled) > 0 {
		errs = t.stepEntries(s, ns, false, errs)
	}
	step, batch := t.steps.Add(1), int32(len(s.Decoded)+len(s.SpecDecoded))
	// Decode tokens take a fast path, by handle or by id: the step's time and the
	// tracker's state are checked once, each entry only for its own count
	// and transition; generated tokens are counted once per step. Anything
	// else goes through the general path, which gives the precise
	// rejection.
	fast := t.inBound(ns) && !t.closed.Load()
	now := t.now(ns)
	gen, seen, errs := t.stepDecodes(s, fast, ns, now, step, batch, errs)
	if len(s.SpecDecoded) > 0 {
		var g int64
		var sawSpec bool
		g, sawSpec, errs = t.stepSpec(s, fast, ns, now, step, batch, errs)
		gen += g
		seen = seen || sawSpec
	}
	if gen != 0 {
		t.stepGen.Add(gen)
	}
	if seen {
		t.saw(SideEngine, now)
	}
	if len(s.Finished) > 0 {
		errs = t.stepEntries(s, ns, true, errs)
	}
	if s.Stats != nil {
		if err := t.recordSched(ns, s.Stats); err != nil {
			errs = append(errs, err)
		}
	} else {
		t.stats.maybeLog(ns)
	}
	t.after(ns)
	if len(errs) == 0 {
		return nil
	}
	return errors.Join(errs...)
}

// stepUpdate is the general path for one step entry: by id (q nil) or by
// handle. It appends a rejection to errs, up to maxStepErrors.
func (t *Tracker) stepUpdate(u *Update, q *Request, ns int64, errs []error) []error {
	var err error
	switch {
	case q == nil:
		err = t.record(u, ns)
	case q.t != t:
		err = t.rejected(reject(u, SideEngine, ReasonUnknownRequest, "the handle is not this tracker's"))
	case q.r == nil:
		err = t.rejected(reject(u, SideEngine, ReasonUnknownRequest, "the request's arrival was rejected"))
	default:
		err = t.recordReq(q.r, u)
	}
	if err != nil && len(errs) < maxStepErrors {
		errs = append(errs, err)
	}
	return errs
}

// stepEntries records the step's entries before its decodes (Queued,
// Preempted, Scheduled) or, with finished, its Finished entries. Kept out of
// Step so a step of decodes alone never builds an Update.
func (t *Tracker) stepEntries(s *Step, ns int64, finished bool, errs []error) []error {
	base := Update{Side: SideEngine, Time: s.Time, Scope: s.Scope, Model: s.Model}
	var u Update
	if finished {
		for i := range s.Finished {
			e := &s.Finished[i]
			u = base
			u.Kind, u.RequestID, u.FinishReason, u.ErrorType = KindFinished, e.RequestID, e.Reason, e.ErrorType
			errs = t.stepUpdate(&u, e.Req, ns, errs)
		}
		return errs
	}
	// Queued and Preempted: the entries by id, then those by handle.
	for _, k := range [...]struct {
		kind Kind
		ids  []string
		reqs []*Request
	}{{KindQueued, s.Queued, s.QueuedReqs}, {KindPreempted, s.Preempted, s.PreemptedReqs}} {
		for _, id := range k.ids {
			u = base
			u.Kind, u.RequestID = k.kind, id
			errs = t.stepUpdate(&u, nil, ns, errs)
		}
		for _, q := range k.reqs {
			u = base
			u.Kind = k.kind
			errs = t.stepUpdate(&u, q, ns, errs)
		}
	}
	for i := range s.Scheduled {
		e := &s.Scheduled[i]
		u = base
		u.Kind, u.RequestID, u.NumComputedTokens, u.NumCachedTokens = KindPrefilling, e.RequestID, e.ComputedTokens, e.CachedTokens
		errs = t.stepUpdate(&u, e.Req, ns, errs)
	}
	return errs
}

// stepSpec records a step's SpecDecoded entries as Step does its Decoded
// ones: by handle on the fast path, anything else through the general
// path. It returns the generated tokens, whether any entry took the fast
// path, and errs with the rejections appended.
func (t *Tracker) stepSpec(s *Step, fast bool, ns, now, step int64, batch int32, errs []error) (int64, bool, []error) {
	var gen int64
	seen := false
	for i := range s.SpecDecoded {
		e := &s.SpecDecoded[i]
		if q := e.Req; fast && q != nil && q.t == t && q.r != nil && uint(e.NewTokens) <= maxNewTokensStep && validSpec(e) {
			r := q.r
			r.mu.Lock()
			if r.claimDecode(ns, now) {
				gen += t.decoded(r, decodeTokens(e.NewTokens, e.DraftTokens, e.AcceptedTokens), ns, step, batch)
				t.specStep(r, e.DraftTokens, e.AcceptedTokens)
				seen = true
				r.mu.Unlock()
				continue
			}
			r.mu.Unlock()
		}
		u := Update{Kind: KindDecoding, RequestID: e.RequestID, NumNewTokens: e.NewTokens,
			NumDraftTokens: e.DraftTokens, NumAcceptedTokens: e.AcceptedTokens}
		errs = t.stepDecoded(s, &u, e.Req, ns, step, batch, errs)
	}
	return gen, seen, errs
}

// claimDecode, with r locked, applies the transition of a decode at ns on
// the fast path and reports whether it could: the transition and time
// order check would allow it. now is when it came (the TTL's start), a
// plain store: now only moves forward, and a race between two updates of
// one request moves the TTL's start by microseconds.
func (r *reqState) claimDecode(ns, now int64) bool {
	if r.done.Load() || r.en.last != KindDecoding && r.en.last != KindPrefilling || ns < r.en.time || r.waitOver(now) {
		return false
	}
	r.en.last, r.en.time, r.touched = KindDecoding, ns, now
	return true
}

// stepDecodes applies the step's Decoded entries: runs of them by handle
// on the fast path, one named by id on its own, anything else on the
// general path.
func (t *Tracker) stepDecodes(s *Step, fast bool, ns, now, step int64, batch int32, errs []error) (gen int64, seen bool, _ []error) {
	for i := 0; i < len(s.Decoded); i++ {
		if fast {
			g, k := t.decodeHandles(s.Decoded[i:], ns, now, step, batch)
			gen, seen, i = gen+g, seen || k > 0, i+k
			if i == len(s.Decoded) {
				break
			}
			if e := &s.Decoded[i]; e.Req == nil && uint(e.NewTokens) <= maxNewTokensStep {
				if g, ok := t.decodedByID(s, e.RequestID, e.NewTokens, ns, now, step, batch); ok {
					gen, seen = gen+g, true
					continue
				}
			}
		}
		e := &s.Decoded[i]
		u := Update{Kind: KindDecoding, RequestID: e.RequestID, NumNewTokens: e.NewTokens}
		errs = t.stepDecoded(s, &u, e.Req, ns, step, batch, errs)
	}
	return gen, seen, errs
}

// decodeHandles applies the entries at the start of es that the fast path
// by handle takes, and returns the tokens generated and how many entries
// it took: the next one is for another path. Few values live across its
// loop, so that they stay in registers.
func (t *Tracker) decodeHandles(es []Decoded, ns, now, step int64, batch int32) (gen int64, k int) {
	for ; k < len(es); k++ {
		e := &es[k]
		q := e.Req
		if q == nil || q.t != t || q.r == nil || uint(e.NewTokens) > maxNewTokensStep {
			return gen, k
		}
		r := q.r
		r.mu.Lock()
		if !r.claimDecode(ns, now) {
			r.mu.Unlock()
			return gen, k
		}
		gen += t.decoded(r, e.NewTokens, ns, step, batch)
		r.mu.Unlock()
	}
	return gen, k
}

// decodedByID is the fast path of a decode named by id: the lookup
// record does, then what the fast path by handle does, with the shard
// held as record holds it. It reports false, having changed nothing, for
// anything the general path must look at: a name it would cut or refuse,
// no single in-flight request of that name, a transition or time order
// it would reject.
func (t *Tracker) decodedByID(s *Step, id string, n int, ns, now, step int64, batch int32) (int64, bool) {
	if id == "" || len(id) > MaxIDLength || len(s.Scope) > MaxNameLength || len(s.Model) > MaxModelLength {
		return 0, false
	}
	sh := t.shardFor(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	r, res := sh.lookup(id, s.Scope, s.Model, SideEngine, KindDecoding, ns)
	if res != lookupFound {
		return 0, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.claimDecode(ns, now) {
		return 0, false
	}
	return t.decoded(r, n, ns, step, batch), true
}

// stepDecoded is the general path of one Decoded or SpecDecoded entry,
// given as u's kind and counts.
func (t *Tracker) stepDecoded(s *Step, u *Update, q *Request, ns, step int64, batch int32, errs []error) []error {
	u.Side, u.Time, u.Scope, u.Model, u.step, u.batch = SideEngine, s.Time, s.Scope, s.Model, step, batch
	return t.stepUpdate(u, q, ns, errs)
}

// validSpec reports whether a speculative entry breaks none of SPEC §8's
// rules, for the fast path; the general path names the rule it breaks.
func validSpec(e *SpecDecoded) bool {
	if e.DraftTokens <= 0 || e.DraftTokens > MaxTokenCount || e.AcceptedTokens < 0 || e.AcceptedTokens > e.DraftTokens {
		return false
	}
	n := decodeTokens(e.NewTokens, e.DraftTokens, e.AcceptedTokens)
	return e.AcceptedTokens <= n && n <= maxNewTokensStep
}
