package otelstats

import (
	"context"
	"errors"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/internal/anchor"
	"github.com/llmtrace/llmtrace/spans"
)

const numShards = 32

// recentSize is how many finished requests each shard remembers, so a late
// update for one is rejected as after_finished rather than held as unknown.
const recentSize = 128

type recentKey struct {
	id, scope, model string
	// enDone: its engine reported FINISHED, after which the engine
	// records nothing more for it (SPEC §1).
	enDone bool
}

// heldUpdate is an update waiting for its request's ARRIVED, with when it
// arrived (in now()'s terms), which its hold window counts from.
type heldUpdate struct {
	Update
	at int64
}

type shard struct {
	mu     sync.Mutex
	reqs   map[string]*reqState
	held   map[string][]heldUpdate
	recent [recentSize]recentKey
	rpos   int
	// due is the earliest time one of reqs may expire (TTL or the wait for
	// the other side), a lower bound: a sweep scans the shard only once it
	// has come, so requests piling up cost nothing until one could end.
	due atomic.Int64

	// Counters for the stats log, written under mu, read atomically.
	promptTok atomic.Int64
	genTok    atomic.Int64
	preempts  atomic.Int64

	_ [64]byte // keep neighbouring shards' locks off one cache line
}

// Tracker turns lifecycle updates into RequestStats, span trees and metrics.
//
// A Tracker is safe for concurrent use by any number of frontend goroutines
// and engine loops: each request has its own lock, and the id maps are
// spread over shards with theirs, so goroutines working on different
// requests do not meet. Recording never blocks on export: span trees go to
// a span processor (the TracerProvider's, or WithSpanProcessor's; use a
// batching one) and metrics to the MeterProvider or the Aggregator. The
// zero Tracker is not usable; create one with NewTracker and end it with
// Shutdown.
type Tracker struct {
	cfg      config
	tracer   trace.Tracer
	src      *spans.Source // WithSpanProcessor's resource and scope
	inst     *instruments
	models   *modelSet
	adapters *modelSet
	// The other free-form metric labels, bounded the same way.
	ops, reasons, errTypes *modelSet

	// anchor and anchorNs are the process's anchor (internal/anchor),
	// copied here for the hot path; a test skews anchorNs to play a wall
	// clock slewed since the process began.
	anchor   time.Time
	anchorNs int64
	seed     maphash.Seed
	shards   [numShards]shard

	// hwm and nextSweep are read by every update from every goroutine
	// and written rarely (hwm at most once per hwmSlack): their own cache
	// line, away from the counters arrivals and finishes write.
	_         [64]byte
	hwm       atomic.Int64 // latest update time seen, ns (may lag by hwmSlack)
	nextSweep atomic.Int64
	closed    atomic.Bool
	_         [64]byte

	// live is set by WithAutoSweep: expiry runs on clock, the tracker's
	// own, never on times taken from input (see clock.go).
	live    bool
	clock   atomic.Int64
	aheadNs int64
	sides   presence

	sweepMu    sync.Mutex
	inflight   atomic.Int64
	held       atomic.Int64
	schedCache atomic.Bool  // the engine reports prefix-cache counters itself
	stepGen    atomic.Int64 // generated tokens Steps counted in bulk, for the stats log

	stats   *statsLog
	trees   sync.Pool
	sampler *sampler
	steps   atomic.Int64 // engine steps recorded, for DetailSteps

	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// NewTracker returns a Tracker configured by opts.
func NewTracker(opts ...Option) (*Tracker, error) {
	cfg := newConfig(opts)
	if cfg.detail == DetailInherit || cfg.detail > DetailTokens {
		cfg.detail = DetailTree
	}
	inst, err := newInstruments(cfg.mp, cfg.agg != nil, cfg.provider)
	if err != nil {
		return nil, err
	}
	if cfg.pdRole != "" {
		inst.setRole(cfg.pdRole)
	}
	now := time.Now()
	t := &Tracker{
		cfg:      cfg,
		tracer:   cfg.tp.Tracer(ScopeName, trace.WithInstrumentationVersion(Version())),
		inst:     inst,
		models:   newModelSet(cfg.models, cfg.maxModels),
		adapters: newModelSet(cfg.adapters, cfg.maxModels),
		ops:      newLabelSet(seedOperations, maxExtraOperations),
		reasons:  newLabelSet(seedReasons, maxExtraReasons),
		errTypes: newLabelSet(nil, maxErrorTypes),
		anchor:   anchor.Start(),
		anchorNs: anchor.StartUnixNano(),
		seed:     maphash.MakeSeed(),
		stop:     make(chan struct{}),
	}
	if cfg.sp != nil {
		res := cfg.res
		if res == nil {
			res = resource.Default()
		}
		t.src = &spans.Source{Resource: res, Scope: instrumentation.Scope{Name: ScopeName, Version: Version()}}
	}
	t.live = cfg.autoSweep > 0
	t.clock.Store(t.ns(now))
	t.aheadNs = int64(cfg.maxAhead)
	t.stats = newStatsLog(t)
	t.sampler = newSampler(cfg.sampling)
	for i := range t.shards {
		t.shards[i].reqs = make(map[string]*reqState)
		t.shards[i].held = make(map[string][]heldUpdate)
		t.shards[i].due.Store(math.MaxInt64)
	}
	t.trees.New = func() any { return &treeBuf{} }
	if cfg.autoSweep > 0 {
		t.wg.Add(1)
		go t.autoSweep(cfg.autoSweep)
	}
	return t, nil
}

// UnixNano returns tm as the tracker writes it into spans: Unix nanoseconds
// on the tracker's timeline, where a time with a monotonic reading is
// measured on the monotonic clock from the process's anchor. Spans a caller
// builds beside the tracker's (a proxy's upstream call, say) use it so that
// they stay inside the request's root while the wall clock is slewed or
// stepped; time.Time.UnixNano reads the wall clock and would not.
func (t *Tracker) UnixNano(tm time.Time) int64 { return t.ns(tm) }

// ns maps t onto wall-clock nanoseconds through the process's anchor: a time
// with a monotonic reading is measured on the monotonic clock from the
// anchor, a time without one (parsed, simulated) keeps its wall value.
func (t *Tracker) ns(tm time.Time) int64 {
	// A time without a monotonic reading (Round(0) leaves it unchanged) is
	// its wall value; computing it directly skips Sub's overflow check,
	// which costs more than the rest of recording a token. Outside the
	// accepted years Sub's saturation keeps far-off times far off.
	if tm == tm.Round(0) {
		if sec := tm.Unix(); sec > minSec && sec < maxSec {
			return sec*1e9 + int64(tm.Nanosecond())
		}
	}
	return t.anchorNs + int64(tm.Sub(t.anchor))
}

// minSec and maxSec bound the fast path of ns: a day beyond the accepted
// times, well inside int64 nanoseconds.
var minSec, maxSec = minTime.Unix() - 86400, maxTime.Unix() + 86400

func (t *Tracker) shardFor(id string) *shard {
	return &t.shards[maphash.String(t.seed, id)&(numShards-1)]
}

func (t *Tracker) advance(ns int64) {
	for {
		old := t.hwm.Load()
		if ns <= old || t.hwm.CompareAndSwap(old, ns) {
			return
		}
	}
}

// Record validates u against its request's lifecycle and applies it. A
// rejected update returns a *RejectError, is counted in llm.rejected_updates
// and leaves the request unchanged. An engine update that arrives before its
// request's ARRIVED is held (nil error) for the hold window, then rejected.
func (t *Tracker) Record(u Update) error {
	ns := t.ns(u.Time)
	if err := t.record(&u, ns); err != nil {
		return err
	}
	t.after(ns)
	return nil
}

// hwmSlack is how far the high-water mark may lag the latest update: moving
// it on every update would make every goroutine write one shared cache line
// per token, and sweeps and holds work in milliseconds and up anyway.
const hwmSlack = int64(time.Millisecond)

func (t *Tracker) after(ns int64) {
	if t.live {
		return // the sweep goroutine keeps time and sweeps
	}
	if ns > t.hwm.Load()+hwmSlack {
		t.advance(ns)
	}
	if ns >= t.nextSweep.Load() {
		t.maybeSweep(ns)
	}
}

// record is the one path every update takes. It returns a *RejectError as
// error, or nil.
func (t *Tracker) record(u *Update, ns int64) error {
	if t.closed.Load() {
		return t.rejected(reject(u, u.Side, ReasonClosed, "the tracker is shut down"))
	}
	t.capNames(u)
	side, rerr := check(u)
	if rerr == nil {
		rerr = t.aheadReject(u, side, ns)
	}
	if rerr != nil {
		return t.rejected(rerr)
	}
	if u.Kind == KindArrived {
		_, err := t.arrive(u, ns, u.Parent, nil)
		return err
	}
	sh := t.shardFor(u.RequestID)
	sh.mu.Lock()
	r, res := sh.lookup(u.RequestID, u.Scope, u.Model, side, u.Kind, ns)
	switch res {
	case lookupNone:
		if found, enDone := sh.recentState(u.RequestID, u.Scope, u.Model); found && !sh.behindHeld(u.RequestID, side) &&
			!(enDone && startsEngine(side, u.Kind)) {
			sh.mu.Unlock()
			return t.rejected(reject(u, side, ReasonAfterFinished, "the request has finished"))
		}
		return t.hold(sh, u, side, ns)
	case lookupAmbiguous:
		sh.mu.Unlock()
		return t.rejected(reject(u, side, ReasonAmbiguousRequest, "several in-flight requests share this id; give scope or model"))
	case lookupDone:
		sh.mu.Unlock()
		return t.rejected(reject(u, side, ReasonAfterFinished, "the request has finished"))
	}
	complete, ended, rerr := t.applyTo(r, u, side, ns, sh.behindHeld(u.RequestID, side) || startsEngine(side, u.Kind))
	if ended {
		// Ended through its handle between lookup and lock.
		sh.mu.Unlock()
		return t.rejected(reject(u, side, ReasonAfterFinished, "the request has finished"))
	}
	if rerr == errHold {
		return t.hold(sh, u, side, ns)
	}
	if complete {
		sh.unlink(r)
	}
	sh.mu.Unlock()
	if complete {
		t.finalize(r, "")
	}
	if rerr != nil {
		return t.rejected(rerr)
	}
	return nil
}

// hold keeps u, whose request has not ARRIVED, for its ARRIVED (applyHeld)
// or the end of the hold window. Called with sh.mu held; it unlocks it.
func (t *Tracker) hold(sh *shard, u *Update, side Side, ns int64) error {
	if t.closed.Load() { // as in arrive: nothing held once Shutdown has flushed
		sh.mu.Unlock()
		return t.rejected(reject(u, side, ReasonClosed, "the tracker is shut down"))
	}
	if int(t.held.Load()) >= t.cfg.maxHeld {
		sh.mu.Unlock()
		return t.rejected(reject(u, side, ReasonOverloaded, "too many updates waiting for their ARRIVED"))
	}
	hu := heldUpdate{Update: *u, at: t.now(ns)}
	hu.Side = side
	hu.Time = time.Unix(0, ns)
	sh.held[u.RequestID] = append(sh.held[u.RequestID], hu)
	t.held.Add(1)
	sh.mu.Unlock()
	return nil
}

// behindHeld reports whether an engine update for id comes behind engine
// updates of that id held for an ARRIVED to come: an id's engine updates
// reach us in the engine's order, so it belongs to the same later request
// as they do, not to one whose engine has reported FINISHED (after which
// it records nothing more for it). Called with sh.mu held.
func (sh *shard) behindHeld(id string, side Side) bool {
	if side != SideEngine || len(sh.held) == 0 {
		return false
	}
	for _, h := range sh.held[id] {
		if h.Side == SideEngine {
			return true
		}
	}
	return false
}

// startsEngine reports whether an update of side and kind starts an
// engine's life of a request (QUEUED, or an encoder run before it): for an
// id whose engine has reported FINISHED, after which it records nothing
// more for that request, it is a later request's with the id (the client
// reused it), whose ARRIVED the frontend's stream, running behind the
// engine's, has not brought yet (SPEC §1). It is held for that ARRIVED,
// and the engine updates behind it with it (behindHeld).
func startsEngine(side Side, k Kind) bool {
	return side == SideEngine && (k == KindQueued || k == KindEncoding)
}

// errHold, from applyTo, says the update is to be held rather than applied
// (behindHeld).
var errHold = &RejectError{}

// applyTo applies u to r under r's lock. ended reports that r had already
// ended (nothing applied); complete that u ended it, and the caller must
// unlink and finalize it.
//
// With behind set (behindHeld, startsEngine), an engine update for a
// request whose engine has reported FINISHED is for a later request with
// its id: applyTo returns errHold and leaves r unchanged.
func (t *Tracker) applyTo(r *reqState, u *Update, side Side, ns int64, behind bool) (complete, ended bool, rerr *RejectError) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done.Load() {
		return false, true, nil
	}
	if behind && r.en.last == KindFinished {
		return false, false, errHold
	}
	if r.waitOver(t.now(ns)) {
		// The wait for this side ended before its update came; no sweep
		// has ended the request yet. Whether one ran in between must not
		// decide (a replayed log's result would hang on unrelated lines).
		r.done.Store(true)
		return true, false, reject(u, side, ReasonAfterFinished, "the wait for this side's updates ended before it came")
	}
	complete, rerr = t.apply(r, u, side, ns)
	if complete {
		r.done.Store(true)
	}
	return complete, false, rerr
}

func (t *Tracker) deferredReject(e *RejectError) {
	t.inst.countReject(e.Reason)
	if t.cfg.onReject != nil {
		t.cfg.onReject(e)
	}
}

// Reject counts e — a rejection found before the update reached the tracker,
// such as a log line or frame that does not decode — in
// llm.rejected_updates under its reason, and returns it, so transports
// report what they could not decode the way the tracker reports what it
// refused.
func (t *Tracker) Reject(e *RejectError) error { return t.rejected(e) }

func (t *Tracker) rejected(e *RejectError) error {
	t.inst.countReject(e.Reason)
	return e
}

// arrive creates a request and applies any updates held for it.
func (t *Tracker) arrive(u *Update, ns int64, parent trace.SpanContext, a *Arrival) (*reqState, error) {
	sh := t.shardFor(u.RequestID)
	sh.mu.Lock()
	if t.closed.Load() {
		// Checked again under the shard's lock: Shutdown marks the tracker
		// closed before it collects each shard's requests, so an arrival
		// either lands before that shard is collected or is refused here —
		// none can slip in after and stay in flight forever.
		sh.mu.Unlock()
		return nil, t.rejected(reject(u, SideFrontend, ReasonClosed, "the tracker is shut down"))
	}
	ended, prev, rerr := sh.reuse(u)
	if rerr != nil {
		sh.mu.Unlock()
		return nil, t.rejected(rerr)
	}
	var evicted *reqState
	if t.inflight.Load() >= int64(t.cfg.maxInFlight) {
		if evicted = sh.oldest(); evicted != nil {
			sh.unlink(evicted)
		}
	}
	r := t.newRequest(u, ns, parent, a, sh)
	r.next = sh.reqs[u.RequestID]
	sh.reqs[u.RequestID] = r
	if prev != nil {
		prev.succ = r
	}
	t.inflight.Add(1)
	complete, errs := t.applyHeld(sh, r, t.now(ns))
	if complete {
		sh.unlink(r)
	}
	sh.mu.Unlock()
	if ended != nil {
		t.finalize(ended, "")
	}
	if evicted != nil {
		t.inst.evicted.Add(context.Background(), 1, t.inst.add...) // SPEC §7: a WithPDRole tracker's role
		t.finalize(evicted, FinishEvicted)
	}
	for _, e := range errs {
		t.deferredReject(e)
	}
	if complete {
		t.finalize(r, "")
	}
	return r, nil
}

// reuse finds the in-flight request with u's id, scope and model: a second
// ARRIVED for it is a duplicate, unless it has finished on one side and
// waits for the other's FINISHED. Then the id has been reused by a new
// request (the client's own ids), and:
//
//   - when it waits for its frontend (the engine finished first), the new
//     ARRIVED, from the frontend's own stream, says the frontend is done
//     with it: the reuse ends that wait, and reuse returns it, unlinked, to
//     be finalized;
//   - when it waits for its engine (the frontend finished first), the
//     engine's stream, running behind, still has its updates on their way
//     (SPEC §1): it keeps waiting beside the new request, and reuse returns
//     it as prev, whose succ the caller sets to the new request; lookup
//     then gives each engine update to the one it belongs to (claims).
//
// A request already waiting beside its successor is neither. Called with
// sh.mu held.
func (sh *shard) reuse(u *Update) (ended, prev *reqState, rerr *RejectError) {
	for c := sh.reqs[u.RequestID]; c != nil; c = c.next {
		if c.scope != u.Scope || c.model != u.Model || c.succ != nil {
			continue
		}
		c.mu.Lock()
		switch {
		case c.done.Load():
			// Ending right now through its handle: no longer in flight.
		case c.waitUntil == 0:
			rerr = reject(u, SideFrontend, ReasonDuplicateArrival, "a request with this id, scope and model is in flight")
		case c.fe.last == KindFinished:
			prev = c
		default:
			c.done.Store(true)
			ended = c
		}
		c.mu.Unlock()
		switch {
		case rerr != nil:
			return nil, nil, rerr
		case prev != nil:
			return nil, prev, nil
		case ended != nil:
			sh.unlink(ended)
			return ended, nil, nil
		}
	}
	return nil, nil, nil
}

// claims reports whether an update of side and kind at ns, which names r's
// id, is r's rather than its successor's (r.succ, the request that reused
// the id while r, finished on the frontend, waits for its engine). Only an
// engine update r's engine could record next (a valid move, in time order)
// can be r's, and it is when it is clearly r's: its time is before the
// successor's ARRIVED (it cannot be a request's that had not arrived yet),
// or it continues r's engine life while the successor's engine has reported
// nothing (an engine works through a request's abort before it takes up the
// retry's). Anything else is the successor's — such as the successor's
// QUEUED stamped a little before its ARRIVED by a skewed engine clock.
// Called with sh.mu held; it takes r's and the successor's locks in turn.
func (r *reqState) claims(side Side, kind Kind, ns int64) bool {
	if side != SideEngine {
		return false
	}
	r.mu.Lock()
	last, fits := r.en.last, ns >= r.en.time && engineFollows(r.en.last, kind, r.encOpen())
	r.mu.Unlock()
	succ := r.succ
	switch {
	case !fits:
		return false
	case ns < succ.arrived:
		return true
	case last == 0:
		return false
	}
	succ.mu.Lock()
	fresh := succ.en.last == 0
	succ.mu.Unlock()
	return fresh
}

// engineFollows reports whether an engine update of kind may follow prev,
// as admitMove decides; encOpen says an encoder run is open.
func engineFollows(prev, kind Kind, encOpen bool) bool {
	if kind == KindEncoding || kind == KindEncoded {
		return encoderMoves(prev, kind, encOpen)
	}
	return allowed[SideEngine][kind]&(1<<prev) != 0
}

// encoderMoves reports whether an ENCODING or ENCODED may follow prev; open
// says an encoder run is open. An ENCODING needs none open and a state an
// encoder runs in (before or during prefill). An ENCODED closes the open
// run in any state but FINISHED, also once the prefill's first token came
// (the same step's outputs, in any order; SPEC §9: the run ends by that
// token, encEnd).
func encoderMoves(prev, kind Kind, open bool) bool {
	if kind == KindEncoded {
		return open && prev != KindFinished
	}
	return !open && encoderStates&(1<<prev) != 0
}

// newRequest is the state of a request that ARRIVED (u) at ns; a, when
// set, is the Arrival it came with (Arrive).
func (t *Tracker) newRequest(u *Update, ns int64, parent trace.SpanContext, a *Arrival, sh *shard) *reqState {
	op := u.Operation
	if op == "" {
		op = "chat"
	}
	// An ARRIVED alone does not make the frontend present: an engine that
	// records its requests' arrivals itself is no frontend (see clock.go).
	role := u.PDRole
	if role == "" {
		role = t.cfg.pdRole
	}
	r := &reqState{
		id: u.RequestID, scope: u.Scope, model: u.Model, operation: op, pdRole: parsePDRole(role),
		arrived: ns, touched: t.now(ns), prompt: -1, cached: -1,
		fe:         sideState{last: KindArrived, time: ns},
		sh:         sh,
		detail:     u.detail,
		trusted:    u.trustParent || t.cfg.trustParent,
		feReported: u.feFinishes,
	}
	r.h = Request{t: t, r: r}
	r.runs = r.runsBuf[:0]
	if r.detail == DetailInherit {
		r.detail = t.cfg.detail
	}
	if u.link.IsValid() {
		r.ext().link = u.link
	}
	if u.LoRAAdapter != "" {
		r.ext().adapter = u.LoRAAdapter
	}
	switch {
	case parent.IsValid():
		r.ext().parent = parent
		r.traceID = parent.TraceID()
		r.parentFlags = parent.TraceFlags().WithSampled(false)
		r.hasParent = true
	case a != nil && a.TraceID.IsValid():
		r.traceID = a.TraceID
	default:
		r.traceID = spans.NewTraceID()
	}
	if a != nil && a.OnFinish != nil {
		r.ext().onFinish = a.OnFinish
	}
	if a != nil && a.Head != HeadUndecided {
		r.headDropped = a.Head == HeadDropped
	} else {
		r.headDropped = t.decideHead(parent, r.trusted, r.traceID, op, r.model) == HeadDropped
	}
	r.spanID = spans.NewSpanID()
	if ttl := int64(t.cfg.requestTTL); ttl > 0 {
		sh.dueBy(r.touched + ttl)
	}
	return r
}

// applyHeld applies the updates that came before r's ARRIVED, in the order
// they came, and reports whether they completed r (then marked done) and
// which they broke. An update held longer than the hold window is rejected,
// as the sweep would have: whether a sweep ran in between must not decide.
// A side records nothing for a request after its FINISHED (SPEC §1), so
// the side's updates held behind its FINISHED are a later request's with
// the same id (the client reused it): they stay held for the id's next
// ARRIVED, or the end of their hold window.
// Engine updates that came first mark the frontend as behind: its stream
// runs apart from the engine's, so its later updates are on their way
// (SPEC §1), and an engine FINISHED among them waits for them. Called with
// sh.mu held.
func (t *Tracker) applyHeld(sh *shard, r *reqState, now int64) (complete bool, errs []*RejectError) {
	hs, ok := sh.held[r.id]
	if !ok {
		return false, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	keep := hs[:0]
	for i := range hs {
		h := &hs[i]
		if complete || !r.matches(h.Scope, h.Model) || r.sideFinished(h.Side) {
			keep = append(keep, *h)
			continue
		}
		t.held.Add(-1)
		if now-h.at >= int64(t.cfg.holdWindow) {
			errs = append(errs, reject(&h.Update, h.Side, ReasonUnknownRequest, "no ARRIVED within the hold window"))
			continue
		}
		// Set before apply, which an engine FINISHED among them reads;
		// a rejected update leaves the request unchanged (SPEC §1).
		behind := r.feBehind
		if h.Side == SideEngine {
			r.feBehind = true
		}
		c, rerr := t.apply(r, &h.Update, h.Side, t.ns(h.Time))
		if rerr != nil {
			r.feBehind = behind
			errs = append(errs, rerr)
		}
		complete = complete || c
	}
	if len(keep) == 0 {
		delete(sh.held, r.id)
	} else {
		sh.held[r.id] = keep
	}
	if complete {
		r.done.Store(true)
	}
	return complete, errs
}

type lookupResult uint8

const (
	lookupFound lookupResult = iota
	lookupNone
	lookupAmbiguous
	lookupDone // only a request that is ending right now matches
)

// lookup finds the in-flight request id names for an update of side and
// kind at ns. Called with sh.mu held.
func (sh *shard) lookup(id, scope, model string, side Side, kind Kind, ns int64) (*reqState, lookupResult) {
	var found *reqState
	ending, superseded := false, false
	for c := sh.reqs[id]; c != nil; c = c.next {
		if !c.matches(scope, model) {
			continue
		}
		if c.done.Load() {
			// Ended through its handle, not yet unlinked.
			ending = true
			continue
		}
		if c.succ != nil {
			superseded = true
			continue
		}
		if found != nil {
			return nil, lookupAmbiguous
		}
		found = c
	}
	if superseded {
		if r, res := sh.lookupSuperseded(id, scope, model, side, kind, ns); res != lookupNone {
			return r, res
		}
	}
	switch {
	case found != nil:
		return found, lookupFound
	case ending:
		return nil, lookupDone
	}
	return nil, lookupNone
}

// lookupSuperseded is lookup among requests whose id was reused while they
// waited for their engine (reuse): the oldest that claims the update, or
// lookupNone when none does (the newest request takes it). Matching
// requests of different scope or model make it ambiguous. Called with
// sh.mu held.
func (sh *shard) lookupSuperseded(id, scope, model string, side Side, kind Kind, ns int64) (*reqState, lookupResult) {
	var pick, first *reqState
	for c := sh.reqs[id]; c != nil; c = c.next { // newest first
		if !c.matches(scope, model) || c.done.Load() {
			continue
		}
		if first == nil {
			first = c
		} else if c.scope != first.scope || c.model != first.model {
			return nil, lookupAmbiguous
		}
		if c.succ != nil && c.claims(side, kind, ns) {
			pick = c
		}
	}
	if pick == nil {
		return nil, lookupNone
	}
	return pick, lookupFound
}

// end marks r done unless someone else ended it first; it reports whether
// the caller ended it and so must unlink and finalize it.
func (r *reqState) end() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done.Load() {
		return false
	}
	r.done.Store(true)
	return true
}

// unlink takes r, already done, out of the shard and remembers it as
// recently finished. Called with sh.mu held.
func (sh *shard) unlink(r *reqState) {
	head := sh.reqs[r.id]
	if head == r {
		if r.next == nil {
			delete(sh.reqs, r.id)
		} else {
			sh.reqs[r.id] = r.next
		}
	} else {
		for c := head; c != nil; c = c.next {
			if c.next == r {
				c.next = r.next
				break
			}
		}
	}
	r.next = nil
	// r is done: whoever ended it, this goroutine, took r.mu after the
	// engine's last update.
	sh.recent[sh.rpos] = recentKey{r.id, r.scope, r.model, r.en.last == KindFinished}
	sh.rpos = (sh.rpos + 1) % recentSize
}

// recentState reports whether a recently finished request matches id,
// scope and model, and whether the engine of every one that does reported
// FINISHED. Called with sh.mu held.
func (sh *shard) recentState(id, scope, model string) (found, enDone bool) {
	enDone = true
	for i := range sh.recent {
		k := &sh.recent[i]
		if k.id == id && (scope == "" || scope == k.scope) && (model == "" || model == k.model) {
			found = true
			enDone = enDone && k.enDone
		}
	}
	return found, found && enDone
}

// oldest ends the in-flight request of the shard that arrived first and
// returns it, or nil. Called with sh.mu held.
func (sh *shard) oldest() *reqState {
	for {
		var o *reqState
		for _, c := range sh.reqs {
			for ; c != nil; c = c.next {
				if !c.done.Load() && (o == nil || c.arrived < o.arrived) {
					o = c
				}
			}
		}
		if o == nil || o.end() {
			return o
		}
	}
}

// Sweep ends what has expired by now: requests whose other side did not
// finish within the grace period, requests idle for longer than the TTL
// (finished as "abandoned"), and held updates whose ARRIVED never came
// (rejected as unknown_request). The tracker sweeps by itself as the times
// of recorded updates advance; call Sweep when updates may stop coming, or
// use WithAutoSweep.
//
// A live tracker (WithAutoSweep) first moves its own clock to now, if now
// is later.
func (t *Tracker) Sweep(now time.Time) {
	ns := t.ns(now)
	if t.live {
		ns = t.tick(now)
	}
	t.sweep(ns, false)
}

// maybeSweep sweeps as of the latest time seen; ns, the update that asks,
// counts exactly even when the high-water mark lags it.
func (t *Tracker) maybeSweep(ns int64) {
	if !t.sweepMu.TryLock() {
		return
	}
	t.advance(ns)
	now := t.hwm.Load()
	every := min(t.cfg.frontendGrace, t.cfg.holdWindow) / 2
	every = max(every, 10*time.Millisecond)
	t.nextSweep.Store(now + int64(every))
	t.sweepMu.Unlock()
	t.sweep(now, false)
	// A tracker fed only per-request updates (no Step, no scheduler
	// stats) logs its line as recorded time passes too.
	t.stats.maybeLog(now)
}

type ended struct {
	r      *reqState
	reason string
}

// sweep expires by now; with all set (Flush) every wait ends and every held
// update is rejected.
func (t *Tracker) sweep(now int64, all bool) {
	var done []ended
	var rejects []*RejectError
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		if len(sh.reqs) > 0 && (all || now >= sh.due.Load()) {
			start := len(done)
			done = t.expireRequests(sh, now, all, done)
			for _, e := range done[start:] {
				sh.unlink(e.r)
			}
		}
		if len(sh.held) > 0 {
			rejects = t.expireHeld(sh, now, all, rejects)
		}
		sh.mu.Unlock()
	}
	for _, e := range done {
		t.finalize(e.r, e.reason)
	}
	for _, e := range rejects {
		t.deferredReject(e)
	}
}

// expireRequests ends sh's requests whose wait for the other side is over
// (all: every wait), and those idle for the TTL (as abandoned), appending
// them to done. Called with sh.mu held.
func (t *Tracker) expireRequests(sh *shard, now int64, all bool, done []ended) []ended {
	ttl := int64(t.cfg.requestTTL)
	// A wait set while we scan lowers due after this store, so the
	// store below, a minimum too, cannot lose it.
	sh.due.Store(math.MaxInt64)
	next := int64(math.MaxInt64)
	for _, head := range sh.reqs {
		for c := head; c != nil; c = c.next {
			c.mu.Lock()
			if !c.done.Load() {
				idle := ttl > 0 && c.feFinish == 0 && c.enFinish == 0
				switch {
				case c.waitUntil != 0 && (all || now >= c.waitUntil):
					c.done.Store(true)
					done = append(done, ended{c, ""})
				case idle && now-c.touched >= ttl:
					c.done.Store(true)
					done = append(done, ended{c, FinishAbandoned})
				case c.waitUntil != 0:
					next = min(next, c.waitUntil)
				case idle:
					next = min(next, c.touched+ttl)
				}
			}
			c.mu.Unlock()
		}
	}
	sh.dueBy(next)
	return done
}

// waitOver reports whether r, finished on one side, waited for the other
// until now in vain. Called with r.mu held.
func (r *reqState) waitOver(now int64) bool { return r.waitUntil != 0 && now >= r.waitUntil }

// dueBy lowers sh.due to ns: one of its requests may expire then.
func (sh *shard) dueBy(ns int64) {
	for {
		old := sh.due.Load()
		if ns >= old || sh.due.CompareAndSwap(old, ns) {
			return
		}
	}
}

// expireHeld rejects sh's held updates whose ARRIVED did not come within the
// hold window (all: every one). Called with sh.mu held.
func (t *Tracker) expireHeld(sh *shard, now int64, all bool, rejects []*RejectError) []*RejectError {
	hold := int64(t.cfg.holdWindow)
	for id, hs := range sh.held {
		keep := hs[:0]
		for j := range hs {
			h := &hs[j]
			if all || now-h.at >= hold {
				rejects = append(rejects, reject(&h.Update, h.Side, ReasonUnknownRequest, "no ARRIVED within the hold window"))
				t.held.Add(-1)
			} else {
				keep = append(keep, *h)
			}
		}
		if len(keep) == 0 {
			delete(sh.held, id)
		} else {
			sh.held[id] = keep
		}
	}
	return rejects
}

// Flush ends what a replayed log's end ends: every request waiting for its
// other side's FINISHED finishes now, and every held update is rejected.
// Requests still in flight stay in flight.
func (t *Tracker) Flush() { t.sweep(t.now(0), true) }

// InFlight returns the number of requests in flight.
func (t *Tracker) InFlight() int { return int(t.inflight.Load()) }

// Shutdown flushes, then ends every request still in flight as "unfinished"
// (their partial spans and metrics are recorded), stops the auto-sweep
// goroutine and rejects later updates. It does not shut down the providers,
// which belong to the caller. It returns ctx's error if ctx ends first.
func (t *Tracker) Shutdown(ctx context.Context) error {
	var err error
	t.once.Do(func() {
		t.closed.Store(true)
		close(t.stop)
		done := make(chan struct{})
		go func() {
			defer close(done)
			t.wg.Wait()
			t.Flush()
			var rest []*reqState
			for i := range t.shards {
				sh := &t.shards[i]
				start := len(rest)
				sh.mu.Lock()
				for _, head := range sh.reqs {
					for c := head; c != nil; c = c.next {
						if c.end() {
							rest = append(rest, c)
						}
					}
				}
				for _, r := range rest[start:] {
					sh.unlink(r)
				}
				sh.mu.Unlock()
			}
			for _, r := range rest {
				t.finalize(r, FinishUnfinished)
			}
		}()
		select {
		case <-done:
		case <-ctx.Done():
			err = ctx.Err()
		}
	})
	return err
}

func (t *Tracker) autoSweep(every time.Duration) {
	defer t.wg.Done()
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		select {
		case <-t.stop:
			return
		case now := <-tk.C:
			ns := t.tick(now)
			t.sweep(ns, false)
			t.stats.maybeLog(ns)
		}
	}
}

var errNilRequest = errors.New("llmtrace: nil request handle")
