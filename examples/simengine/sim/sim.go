// Package sim is a simulated LLM serving engine that schedules like vLLM V1
// and is instrumented only through llmtrace's public API.
//
// The engine core runs continuous batching: an FCFS waiting queue, a
// per-step token budget, a cap on running requests, chunked prefill, a paged
// KV cache with prefix caching by block hashes, and recompute preemption of
// the newest running request when a running request needs a block and none
// is free. The frontend tokenizes the prompt, hands the request to the
// engine, and detokenizes and delivers every token shortly after the engine
// step that produced it.
//
// Time is virtual: events (arrivals, input processing, engine steps,
// deliveries) are processed in time order and the clock jumps from one to
// the next, so an hour of traffic replays in seconds; Config.Realtime paces
// it against the wall clock instead. Every update goes to the
// otelstats.Tracker with its virtual time: the frontend through the
// Tracker.Arrive handle (InputProcessed, Detokenized, Finish), the engine
// through Tracker.Step (Queued, Scheduled, Preempted, Decoded, Finished and
// SchedulerStats).
//
// The simulator also keeps each request's true phase boundaries (Truth), so
// tests can check that what llmtrace derives equals what happened.
package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/llmtrace/llmtrace/examples/simengine/internal/workload"
	"github.com/llmtrace/llmtrace/otelstats"
)

// Truth is what really happened to one request, known to the simulator.
// Zero times never happened.
type Truth struct {
	ID string
	// Arrival is ARRIVED; InputProcessed is INPUT_PROCESSED.
	Arrival, InputProcessed time.Time
	// FirstQueued is when the engine first put the request in its waiting
	// queue; FirstScheduled when it first scheduled prompt tokens of it.
	FirstQueued, FirstScheduled time.Time
	// FirstToken is when the frontend delivered the first output token.
	FirstToken time.Time
	// Finish is when the frontend delivered the last token and finished.
	Finish time.Time
	// EngineFinish is when the engine finished the request.
	EngineFinish time.Time

	PromptTokens int
	OutputTokens int
	// CachedTokens are the prompt tokens served from the prefix cache at the
	// first scheduling.
	CachedTokens int
	// RecomputeCachedTokens are cache hits of recompute prefills after
	// preemptions.
	RecomputeCachedTokens int
	Preemptions           int
	// Preempted sums the time from each preemption to the next scheduling.
	Preempted time.Duration
	// SharedPrefix is the length of the system prompt the prompt starts
	// with (0 for none).
	SharedPrefix int
	FinishReason string
	ErrorType    string
}

// Progress is reported after every finished request.
type Progress struct {
	Done, Total int
	Now         time.Time // virtual
}

// Result is a finished simulation.
type Result struct {
	// Requests are in workload order.
	Requests []Truth
	Steps    int
	// Preemptions over the run.
	Preemptions int
	// Start is the first arrival, End the last event (virtual times).
	Start, End time.Time
	// MaxRunning and MaxWaiting are the largest batch and queue seen.
	MaxRunning, MaxWaiting int
	// Rejections counts updates the tracker rejected (a simulator bug if
	// not zero); FirstRejection is the first of them.
	Rejections     int
	FirstRejection error
}

// Finish reasons and error types the simulator produces.
const (
	ReasonStop             = otelstats.FinishStop
	ReasonLength           = otelstats.FinishLength
	ReasonAbort            = otelstats.FinishAbort
	ErrContextLenExceeded  = "context_length_exceeded"
	requestIDPrefix        = "req-"
	checkContextEveryEvent = 1024
)

type reqState uint8

const (
	stPending reqState = iota // not at the engine yet
	stWaiting
	stRunning
	stDone
)

type request struct {
	idx    int
	id     string
	prompt int
	maxOut int
	reason string
	out    int
	// computed is vLLM's num_computed_tokens.
	computed     int
	blocks       []int32
	hashedBlocks int
	bs           int // block size
	prefix       int // index into Config.Prefixes, or −1
	shared       int // shared prefix tokens
	uid          uint64
	state        reqState
	// inPrefill: the current run (since admission or resume) has not
	// produced a token yet, so its scheduled tokens are prompt (or
	// recompute) tokens and are reported as PREFILLING.
	inPrefill bool
	runCached int
	newTokens int
	preempted time.Time // last preemption, while waiting to resume
	handle    *otelstats.Request
	delivered int
	// abortAt is the delivered token count at which the client
	// disconnects (0: never); feDone is set once the frontend finished.
	abortAt int
	feDone  bool
	truth   *Truth
}

func (r *request) numTokens() int { return r.prompt + r.out }

// blockHash is the hash of r's block i: blocks wholly inside the shared
// system prompt hash the same for every request with that prompt; any other
// block holds tokens of r alone.
func (r *request) blockHash(i int) uint64 {
	if r.prefix >= 0 && (i+1)*r.bs <= r.shared {
		return splitmix64(uint64(r.prefix+1)<<40 ^ uint64(i))
	}
	return splitmix64(r.uid ^ uint64(i)*0x2545f4914f6cdd1d)
}

// Event kinds.
const (
	evArrive uint8 = iota
	evInputDone
	evAtEngine
	evStepEnd
	evDeliver
	evAbortAtEngine
)

type event struct {
	at   int64 // virtual ns since the Unix epoch
	seq  uint64
	kind uint8
	req  int32
	last bool // evDeliver: the final token
}

type sim struct {
	cfg Config
	tr  *otelstats.Tracker
	ctx context.Context

	reqs    []request
	truths  []Truth
	kv      *kvCache
	events  eventHeap
	seq     uint64
	now     int64
	inbox   []*request
	waiting []*request
	running []*request
	sched   []*request
	aborts  []*request // aborted by the frontend, not yet freed by the engine
	busy    bool
	step    otelstats.Step
	stats   otelstats.SchedulerStats
	done    int
	res     Result

	sampling *otelstats.SamplingParams

	wallStart time.Time
	virtStart int64
}

// Run simulates serving reqs (in arrival order) and records everything in
// tr. It returns when every request has finished, or with ctx's error.
// Run does not shut tr down.
func Run(ctx context.Context, cfg Config, reqs []workload.Request, tr *otelstats.Tracker) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	if tr == nil {
		return nil, errors.New("sim: nil tracker")
	}
	if cfg.Operation == "" {
		cfg.Operation = "chat"
	}
	s := &sim{cfg: cfg, tr: tr, ctx: ctx, kv: newKVCache(cfg.NumBlocks, cfg.BlockSize)}
	temp, topP := 0.7, 0.95
	s.sampling = &otelstats.SamplingParams{Temperature: &temp, TopP: &topP}
	s.setup(reqs)
	if err := s.loop(); err != nil {
		return nil, err
	}
	s.res.Requests = s.truths
	if len(reqs) > 0 {
		s.res.Start = reqs[0].Arrival
	}
	s.res.End = vt(s.now)
	return &s.res, nil
}

func (s *sim) setup(in []workload.Request) {
	s.reqs = make([]request, len(in))
	s.truths = make([]Truth, len(in))
	prefixRand := splitmix64(s.cfg.Seed ^ 0x70726566)
	abortRand := splitmix64(s.cfg.Seed ^ 0x61626f7274)
	for i := range in {
		w := &in[i]
		r := &s.reqs[i]
		t := &s.truths[i]
		prompt, out := max(w.PromptTokens, 1), max(w.OutputTokens, 1)
		*r = request{
			idx: i, id: requestIDPrefix + strconv.Itoa(i), prompt: prompt, maxOut: out,
			reason: ReasonStop, prefix: -1, truth: t, bs: s.cfg.BlockSize, inPrefill: true,
			uid: splitmix64(s.cfg.Seed<<32 ^ uint64(i) ^ 0x756e6971),
		}
		if room := s.cfg.MaxModelLen - prompt; room > 0 && out > room {
			r.maxOut, r.reason = room, ReasonLength
		}
		// The system prompt: one of those that leave MinUnique tokens.
		var fits []int
		for k, p := range s.cfg.Prefixes {
			if p+s.cfg.MinUnique <= prompt {
				fits = append(fits, k)
			}
		}
		if len(fits) > 0 {
			k := fits[splitmix64(prefixRand^uint64(i))%uint64(len(fits))]
			r.prefix, r.shared = k, s.cfg.Prefixes[k]
		}
		if r.maxOut > 1 && float64(splitmix64(abortRand^uint64(i))>>11)/(1<<53) < s.cfg.AbortRate {
			r.abortAt = r.maxOut / 2
		}
		*t = Truth{ID: r.id, PromptTokens: prompt, SharedPrefix: r.shared}
		s.push(event{at: w.Arrival.UnixNano(), kind: evArrive, req: int32(i)})
	}
	if len(in) > 0 {
		s.virtStart = in[0].Arrival.UnixNano()
	}
	s.wallStart = time.Now()
}

// vt turns virtual nanoseconds into a time.Time (UTC, no monotonic reading).
func vt(ns int64) time.Time { return time.Unix(0, ns).UTC() }

func (s *sim) push(e event) {
	s.seq++
	e.seq = s.seq
	s.events.push(e)
}

func (s *sim) loop() error {
	n := 0
	for s.events.len() > 0 {
		e := s.events.pop()
		if n++; n%checkContextEveryEvent == 0 {
			if err := s.ctx.Err(); err != nil {
				return err
			}
		}
		if s.cfg.Realtime {
			if err := s.pace(e.at); err != nil {
				return err
			}
		}
		s.now = e.at
		r := &s.reqs[e.req]
		switch e.kind {
		case evArrive:
			s.arrive(r)
		case evInputDone:
			s.inputDone(r)
		case evAtEngine:
			r.state = stWaiting
			s.inbox = append(s.inbox, r)
			if !s.busy {
				if err := s.startStep(); err != nil {
					return err
				}
			}
		case evStepEnd:
			s.endStep()
			if err := s.startStep(); err != nil {
				return err
			}
		case evDeliver:
			s.deliver(r, e.last)
		case evAbortAtEngine:
			if r.state == stDone {
				break // the engine finished it before the abort arrived
			}
			s.aborts = append(s.aborts, r)
			if !s.busy {
				if err := s.startStep(); err != nil {
					return err
				}
			}
		}
	}
	if s.done != len(s.reqs) {
		return fmt.Errorf("sim: %d of %d requests never finished", len(s.reqs)-s.done, len(s.reqs))
	}
	return nil
}

// pace sleeps until the wall clock reaches virtual time at.
func (s *sim) pace(at int64) error {
	target := s.wallStart.Add(time.Duration(float64(at-s.virtStart) / s.cfg.Speedup))
	d := time.Until(target)
	if d <= 0 {
		return nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
}

func (s *sim) reject(err error) {
	if err == nil {
		return
	}
	s.res.Rejections++
	if s.res.FirstRejection == nil {
		s.res.FirstRejection = err
	}
}

// Frontend.

func (s *sim) arrive(r *request) {
	at := vt(s.now)
	h, err := s.tr.Arrive(s.ctx, r.id, otelstats.Arrival{Time: at, Model: s.cfg.Model, Operation: s.cfg.Operation})
	s.reject(err)
	r.handle = h
	r.truth.Arrival = at
	f := s.cfg.Frontend
	s.push(event{at: s.now + int64(f.InputBase) + int64(r.prompt)*int64(f.InputPerToken), kind: evInputDone, req: int32(r.idx)})
}

func (s *sim) inputDone(r *request) {
	at := vt(s.now)
	s.reject(r.handle.InputProcessed(at, r.prompt, s.sampling))
	r.truth.InputProcessed = at
	if r.prompt >= s.cfg.MaxModelLen {
		// vLLM's OpenAI server answers 400: the prompt does not fit the
		// context window. The engine never sees the request.
		s.reject(r.handle.Fail(at, ErrContextLenExceeded))
		r.state = stDone
		r.truth.Finish = at
		r.truth.FinishReason, r.truth.ErrorType = otelstats.FinishError, ErrContextLenExceeded
		s.finished()
		return
	}
	s.push(event{at: s.now + int64(s.cfg.Frontend.ToEngine), kind: evAtEngine, req: int32(r.idx)})
}

func (s *sim) deliver(r *request, last bool) {
	if r.feDone {
		return // the client is gone; tokens still in flight are dropped
	}
	at := vt(s.now)
	s.reject(r.handle.Detokenized(at, 1, s.cfg.Frontend.DetokenizeBusy))
	r.delivered++
	if r.delivered == 1 {
		r.truth.FirstToken = at
	}
	switch {
	case last:
		s.reject(r.handle.Finish(at, r.reason))
		r.truth.FinishReason = r.reason
	case r.delivered == r.abortAt:
		// The client disconnects: the frontend ends the request and sends
		// the abort to the engine core.
		s.reject(r.handle.Abort(at))
		r.truth.FinishReason, r.truth.ErrorType = ReasonAbort, ReasonAbort
		s.push(event{at: s.now + int64(s.cfg.Frontend.ToEngine), kind: evAbortAtEngine, req: int32(r.idx)})
	default:
		return
	}
	r.feDone = true
	r.truth.Finish = at
	r.truth.OutputTokens = r.delivered
	s.finished()
}

// freeAborted is the engine core taking the frontend's aborts at the top of
// its loop: each aborted request leaves the waiting queue or the running
// batch, its KV blocks are freed, and the engine reports it finished.
func (s *sim) freeAborted() {
	if len(s.aborts) == 0 {
		return
	}
	for _, r := range s.aborts {
		if r.state == stDone {
			continue
		}
		if r.state == stWaiting {
			// Preempted (it had delivered tokens): the wait lasts until
			// the engine ends the request (SPEC §2, the engine's FINISHED
			// ends its last run).
			r.truth.Preempted += vt(s.now).Sub(r.preempted)
		}
		s.kv.free(r)
		r.state = stDone
		r.truth.EngineFinish = vt(s.now)
		s.step.Finished = append(s.step.Finished, otelstats.Finished{Req: r.handle, Reason: ReasonAbort})
	}
	clear(s.aborts)
	s.aborts = s.aborts[:0]
	s.waiting = slices.DeleteFunc(s.waiting, func(r *request) bool { return r.state == stDone })
	s.running = slices.DeleteFunc(s.running, func(r *request) bool { return r.state == stDone })
}

func (s *sim) finished() {
	s.done++
	if s.cfg.Progress != nil {
		s.cfg.Progress(Progress{Done: s.done, Total: len(s.reqs), Now: vt(s.now)})
	}
}

// Engine core.

func (s *sim) resetStep() {
	st := &s.step
	st.QueuedReqs, st.PreemptedReqs, st.Scheduled = st.QueuedReqs[:0], st.PreemptedReqs[:0], st.Scheduled[:0]
	st.Decoded, st.Finished, st.Stats = st.Decoded[:0], st.Finished[:0], nil
	st.Time = vt(s.now)
}

// startStep is the top of vLLM's engine-core loop: take new requests into
// the waiting queue, schedule, and start the forward pass. With nothing to
// run the engine goes idle until the next request reaches it.
func (s *sim) startStep() error {
	for {
		s.resetStep()
		for _, r := range s.inbox {
			s.waiting = append(s.waiting, r)
			// Requests by handle, as an engine that keeps the frontend's
			// handle with its request does: no id lookup per entry.
			s.step.QueuedReqs = append(s.step.QueuedReqs, r.handle)
			if r.truth.FirstQueued.IsZero() {
				r.truth.FirstQueued = vt(s.now)
			}
		}
		s.inbox = s.inbox[:0]
		s.freeAborted()
		prefill, decoding := s.schedule()
		if len(s.step.QueuedReqs)+len(s.step.PreemptedReqs)+len(s.step.Scheduled)+len(s.step.Finished) > 0 {
			s.reject(s.tr.Step(&s.step))
		}
		s.res.MaxWaiting = max(s.res.MaxWaiting, len(s.waiting))
		if len(s.sched) > 0 {
			s.busy = true
			s.res.Steps++
			s.res.MaxRunning = max(s.res.MaxRunning, len(s.running))
			s.push(event{at: s.now + int64(s.cfg.Cost.StepTime(prefill, decoding)), kind: evStepEnd})
			return nil
		}
		s.busy = false
		if len(s.waiting) == 0 || len(s.step.PreemptedReqs) == 0 {
			if len(s.waiting) > 0 {
				return fmt.Errorf("sim: stalled with %d waiting and %d running requests, %d of %d KV blocks free",
					len(s.waiting), len(s.running), s.kv.nfree, len(s.kv.blocks))
			}
			return nil
		}
		// Only preemptions this pass (the last running request preempted
		// itself): schedule again at once with the freed blocks.
	}
}

// schedule is vLLM V1's Scheduler.schedule: running requests first, in
// order, each getting the tokens it still needs (one to decode, or the rest
// of a chunked or recompute prefill) within the token budget, preempting
// from the back of the running list when the KV cache is full; then, if
// nothing was preempted, waiting requests in FCFS order with their prefix
// cache hits, until the budget, the KV cache or the running cap stops it.
// It returns the prompt tokens to compute and the decoding requests.
func (s *sim) schedule() (prefill, decoding int) {
	s.sched = s.sched[:0]
	budget := s.cfg.MaxNumBatchedTokens
	preempted := false
	for i := 0; i < len(s.running) && budget > 0; {
		r := s.running[i]
		n := min(r.numTokens()-r.computed, budget)
		ok := false
		for {
			if s.kv.allocate(r, nil, n) {
				ok = true
				break
			}
			victim := s.running[len(s.running)-1]
			s.running = s.running[:len(s.running)-1]
			s.preempt(victim)
			preempted = true
			if victim == r {
				break
			}
		}
		if !ok {
			break
		}
		s.take(r, n)
		budget -= n
		i++
	}
	if !preempted {
		for len(s.waiting) > 0 && budget > 0 && len(s.running) < s.cfg.MaxNumSeqs {
			r := s.waiting[0]
			hits := s.kv.lookup(r)
			cached := len(hits) * s.cfg.BlockSize
			n := min(r.numTokens()-cached, budget)
			if !s.kv.allocate(r, hits, n) {
				break
			}
			s.waiting = s.waiting[1:]
			r.state = stRunning
			r.computed, r.hashedBlocks, r.runCached = cached, len(hits), cached
			s.running = append(s.running, r)
			t := r.truth
			if t.FirstScheduled.IsZero() {
				t.FirstScheduled, t.CachedTokens = vt(s.now), cached
			} else {
				t.RecomputeCachedTokens += cached
				t.Preempted += vt(s.now).Sub(r.preempted)
			}
			s.take(r, n)
			budget -= n
		}
	}
	for _, r := range s.sched {
		if r.inPrefill {
			prefill += r.newTokens
		} else {
			decoding++
		}
	}
	return prefill, decoding
}

// take schedules n tokens of r in this step.
func (s *sim) take(r *request, n int) {
	r.newTokens = n
	s.sched = append(s.sched, r)
	if r.inPrefill {
		s.step.Scheduled = append(s.step.Scheduled, otelstats.Scheduled{
			Req: r.handle, ComputedTokens: r.computed + n, CachedTokens: r.runCached,
		})
	}
}

// preempt evicts r (recompute preemption): its blocks are freed, it goes to
// the front of the waiting queue and will recompute prompt and generated
// tokens when it resumes.
func (s *sim) preempt(r *request) {
	s.kv.free(r)
	r.computed, r.inPrefill, r.runCached, r.state = 0, true, 0, stWaiting
	r.preempted = vt(s.now)
	s.waiting = append(s.waiting, nil)
	copy(s.waiting[1:], s.waiting)
	s.waiting[0] = r
	s.step.PreemptedReqs = append(s.step.PreemptedReqs, r.handle)
	r.truth.Preemptions++
	s.res.Preemptions++
}

// endStep is the bottom of the loop: the forward pass is done; every request
// whose computed tokens caught up with its tokens samples one more, and
// those at their output length finish.
func (s *sim) endStep() {
	s.resetStep()
	deliverAt := s.now + int64(s.cfg.Frontend.Deliver)
	finished := false
	for _, r := range s.sched {
		r.computed += r.newTokens
		r.newTokens = 0
		s.kv.commit(r)
		if r.computed < r.numTokens() {
			continue // a chunk of a longer prefill
		}
		r.out++
		r.inPrefill = false
		s.step.Decoded = append(s.step.Decoded, otelstats.Decoded{Req: r.handle, NewTokens: 1})
		last := r.out == r.maxOut
		s.push(event{at: deliverAt, kind: evDeliver, req: int32(r.idx), last: last})
		if last {
			s.step.Finished = append(s.step.Finished, otelstats.Finished{Req: r.handle, Reason: r.reason})
			s.kv.free(r)
			r.state = stDone
			r.truth.EngineFinish = vt(s.now)
			finished = true
		}
	}
	if finished {
		keep := s.running[:0]
		for _, r := range s.running {
			if r.state == stRunning {
				keep = append(keep, r)
			}
		}
		clear(s.running[len(keep):])
		s.running = keep
	}
	s.stats = otelstats.SchedulerStats{Running: len(s.running), Waiting: len(s.waiting) + len(s.inbox), KVCacheUsage: s.kv.usage()}
	s.step.Stats = &s.stats
	s.reject(s.tr.Step(&s.step))
	s.busy = false
}
