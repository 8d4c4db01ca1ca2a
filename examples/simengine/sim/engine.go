package sim

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/llmtrace/llmtrace/examples/simengine/internal/workload"
	"github.com/llmtrace/llmtrace/otelstats"
)

type reqState uint8

const (
	stPending reqState = iota // not at the engine yet
	stWaiting
	stLoading // a decode instance loading the prompt's KV cache
	stRunning
	stHeld // a prefill instance's finished request whose KV the decode instance has yet to load
	stDone
)

// image is one image of a multimodal prompt: its placeholder tokens
// [start, start+tokens), and whether the current run has its encoder output.
type image struct {
	start, tokens int32
	id            uint64
	encoded       bool
}

type request struct {
	idx    int32
	route  int32 // the router's record (RunPD), or −1
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
	newTokens int // scheduled in this step
	draft     int // draft tokens proposed in this step
	preempted time.Time
	handle    *otelstats.Request
	delivered int
	// abortAt is the delivered token count at which the client
	// disconnects (0: never); feDone is set once the frontend finished.
	abortAt int
	feDone  bool
	truth   *Truth
	adapter string
	images  []image
	// A decode instance's transfer: transferred once the KV cache arrived
	// (or was not needed); remote is the tokens loaded.
	transferred bool
	remote      int
	// traceparent is the W3C trace context the router sent along.
	traceparent string
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

// instance is one engine core with its frontend and its tracker.
type instance struct {
	s    *sim
	idx  uint8
	name string
	role string // "" (unified), PDRolePrefill or PDRoleDecode
	cfg  *Config
	tr   *otelstats.Tracker

	reqs   []request
	truths []Truth
	kv     *kvCache
	enc    *encoderCache

	inbox   []*request
	waiting []*request
	ready   []*request // KV arrived, to the front of the queue
	running []*request
	sched   []*request
	aborts  []*request // aborted by the frontend, not yet freed by the engine
	skipped []*request
	loading int            // decode: requests loading their KV cache
	held    int            // prefill: finished requests whose KV cache is still to be read
	loras   map[string]int // running requests per adapter
	busy    bool

	step, late otelstats.Step
	stats      otelstats.SchedulerStats
	kvWaits    []*request
	releases   []int32 // decode: prefill-side requests whose KV is not needed
	runs       []encoderRun
	lateReqs   []*request

	load                   loadSeries
	steps, preemptions     int
	maxRunning, maxWaiting int
	maxAdapters            int
}

func (s *sim) addInstance(name, role string, tr *otelstats.Tracker) *instance {
	in := &instance{
		s: s, idx: uint8(len(s.inst)), name: name, role: role, cfg: &s.cfg, tr: tr,
		kv:    newKVCache(s.cfg.NumBlocks, s.cfg.BlockSize),
		enc:   newEncoderCache(s.cfg.Multimodal.EncoderCacheImages),
		loras: map[string]int{},
	}
	s.inst = append(s.inst, in)
	return in
}

func (in *instance) result() Instance {
	return Instance{Name: in.name, Role: in.role, Steps: in.steps, Preemptions: in.preemptions,
		MaxRunning: in.maxRunning, MaxWaiting: in.maxWaiting, MaxAdapters: in.maxAdapters, Load: in.load.points(), LoadWidth: time.Duration(in.load.width)}
}

// setup builds every request: on first (the engine, or the prefill
// instance) and, with a decode instance, on it and the router too.
func (s *sim) setup(in []workload.Request, first, decode *instance) {
	s.total = len(in)
	prefixRand := splitmix64(s.cfg.Seed ^ 0x70726566)
	abortRand := splitmix64(s.cfg.Seed ^ 0x61626f7274)
	first.reqs, first.truths = make([]request, len(in)), make([]Truth, len(in))
	if decode != nil {
		decode.reqs, decode.truths = make([]request, len(in)), make([]Truth, len(in))
		s.router.routes, s.router.truths = make([]route, len(in)), make([]Truth, len(in))
	}
	for i := range in {
		w := &in[i]
		r := s.newRequest(i, w, prefixRand)
		aborts := r.maxOut > 1 && float64(splitmix64(abortRand^uint64(i))>>11)/(1<<53) < s.cfg.AbortRate
		if decode == nil {
			if aborts {
				r.abortAt = r.maxOut / 2
			}
			first.place(i, r)
			s.push(event{at: w.Arrival.UnixNano(), kind: evArrive, req: int32(i), inst: first.idx})
			continue
		}
		// P/D: the router's record, P's share (one token) and D's.
		rt := &s.router.routes[i]
		*rt = route{id: r.id, prompt: r.prompt, maxOut: r.maxOut, reason: r.reason, adapter: r.adapter, truth: &s.router.truths[i]}
		if aborts {
			rt.abortAt = r.maxOut / 2
		}
		d := r
		d.route = int32(i)
		decode.place(i, d)
		p := r
		p.route, p.maxOut, p.reason = int32(i), 1, ReasonRemoteDecode
		p.images = slices.Clone(r.images)
		first.place(i, p)
		s.push(event{at: w.Arrival.UnixNano(), kind: evRouterArrive, req: int32(i)})
	}
}

// newRequest is request i of the workload as an engine sees it.
func (s *sim) newRequest(i int, w *workload.Request, prefixRand uint64) request {
	cfg := &s.cfg
	text := max(w.PromptTokens, 1)
	imgTokens := w.Images * cfg.Multimodal.TokensPerImage
	prompt, out := text+imgTokens, max(w.OutputTokens, 1)
	r := request{
		id: requestIDPrefix + strconv.Itoa(i), route: -1, prompt: prompt, maxOut: out,
		reason: ReasonStop, prefix: -1, bs: cfg.BlockSize, inPrefill: true, adapter: w.Adapter,
		uid: splitmix64(cfg.Seed<<32 ^ uint64(i) ^ 0x756e6971),
	}
	if room := cfg.MaxModelLen - prompt; room > 0 && out > room {
		r.maxOut, r.reason = room, ReasonLength
	}
	// The system prompt: one of those that leave MinUnique tokens of text.
	var fits []int
	for k, p := range cfg.Prefixes {
		if p+cfg.MinUnique <= text {
			fits = append(fits, k)
		}
	}
	if len(fits) > 0 {
		k := fits[splitmix64(prefixRand^uint64(i))%uint64(len(fits))]
		r.prefix, r.shared = k, cfg.Prefixes[k]
	}
	if w.Images > 0 {
		// Right after the system prompt, or at the end of the user's
		// text before the chat template's last few tokens.
		start := r.shared
		if w.ImagesLast {
			start = max(r.shared, prompt-8-imgTokens)
		}
		for k := range w.Images {
			r.images = append(r.images, image{
				start: int32(start + k*cfg.Multimodal.TokensPerImage), tokens: int32(cfg.Multimodal.TokensPerImage),
				id: splitmix64(r.uid ^ uint64(k+1)*0x696d616765),
			})
		}
	}
	return r
}

// place stores r as request i of the instance.
func (in *instance) place(i int, r request) {
	t := &in.truths[i]
	r.idx, r.truth = int32(i), t
	in.reqs[i] = r
	*t = Truth{PromptTokens: r.prompt, SharedPrefix: r.shared, PDRole: in.role, Adapter: r.adapter, Images: len(r.images)}
}

// wake starts a step if the engine is idle.
func (in *instance) wake() error {
	if in.busy {
		return nil
	}
	return in.startStep()
}

// freeAborted is the engine core taking the frontend's aborts at the top of
// its loop: each aborted request leaves the waiting queue or the running
// batch, its KV blocks are freed, and the engine reports it finished.
func (in *instance) freeAborted() {
	if len(in.aborts) == 0 {
		return
	}
	now := vt(in.s.now)
	for _, r := range in.aborts {
		if r.state == stDone {
			continue
		}
		if r.state == stWaiting && !r.preempted.IsZero() {
			// Preempted (it had delivered tokens): the wait lasts until
			// the engine ends the request (SPEC §2, the engine's FINISHED
			// ends its last run), inside the request (SPEC §3: its
			// llm.queue span lies in the root, which the abort ended).
			r.truth.Preempted += waitInRequest(r.truth, r.preempted, now)
		}
		if r.state == stRunning {
			in.unrun(r)
		}
		in.kv.free(r)
		r.state = stDone
		r.truth.EngineFinish = now
		in.step.Finished = append(in.step.Finished, otelstats.Finished{Req: r.handle, Reason: ReasonAbort})
	}
	clear(in.aborts)
	in.aborts = in.aborts[:0]
	gone := func(r *request) bool { return r.state == stDone }
	in.waiting = slices.DeleteFunc(in.waiting, gone)
	in.ready = slices.DeleteFunc(in.ready, gone)
	in.running = slices.DeleteFunc(in.running, gone)
}

// unrun takes r's adapter out of the batch's count.
func (in *instance) unrun(r *request) {
	if r.adapter == "" {
		return
	}
	if in.loras[r.adapter]--; in.loras[r.adapter] <= 0 {
		delete(in.loras, r.adapter)
	}
}

func (in *instance) resetStep() {
	for _, st := range []*otelstats.Step{&in.step, &in.late} {
		st.QueuedReqs, st.PreemptedReqs, st.Scheduled = st.QueuedReqs[:0], st.PreemptedReqs[:0], st.Scheduled[:0]
		st.Decoded, st.SpecDecoded, st.Finished, st.Stats = st.Decoded[:0], st.SpecDecoded[:0], st.Finished[:0], nil
		st.Time = vt(in.s.now)
	}
	in.kvWaits, in.runs, in.lateReqs = in.kvWaits[:0], in.runs[:0], in.lateReqs[:0]
}

// stepWork is what one step computes, for its duration.
type stepWork struct {
	prefill, decoding, verify, maxDraft int
	encode                              time.Duration
}

func (w stepWork) time(c Cost, adapters int) time.Duration {
	return w.encode + c.StepTime(w.prefill, w.decoding) + time.Duration(w.verify)*c.PerVerifyToken +
		time.Duration(w.maxDraft)*c.DraftPass + time.Duration(adapters)*c.PerAdapter
}

// startStep is the top of vLLM's engine-core loop: take new requests into
// the waiting queue, schedule, and start the forward pass. With nothing to
// run the engine goes idle until the next request (or KV cache) reaches it.
func (in *instance) startStep() error {
	s := in.s
	for {
		in.resetStep()
		for _, r := range in.inbox {
			in.waiting = append(in.waiting, r)
			// Requests by handle, as an engine that keeps the frontend's
			// handle with its request does: no id lookup per entry.
			in.step.QueuedReqs = append(in.step.QueuedReqs, r.handle)
			if r.truth.FirstQueued.IsZero() {
				r.truth.FirstQueued = vt(s.now)
			}
		}
		in.inbox = in.inbox[:0]
		in.freeAborted()
		work := in.schedule()
		if len(in.step.QueuedReqs)+len(in.step.PreemptedReqs)+len(in.step.Scheduled)+len(in.step.Finished) > 0 {
			s.reject(in.tr.Step(&in.step))
		}
		in.recordAfterStep(work)
		for _, i := range in.releases {
			if err := s.router.release(s, i); err != nil {
				return err
			}
		}
		in.releases = in.releases[:0]
		in.maxWaiting = max(in.maxWaiting, len(in.waiting)+in.loading)
		if len(in.sched) > 0 {
			in.busy = true
			in.steps++
			in.maxRunning = max(in.maxRunning, len(in.running))
			in.maxAdapters = max(in.maxAdapters, len(in.loras))
			s.push(event{at: s.now + int64(work.time(in.cfg.Cost, len(in.loras))), kind: evStepEnd, inst: in.idx})
			return nil
		}
		in.busy = false
		if len(in.waiting) == 0 || len(in.step.PreemptedReqs) == 0 {
			if len(in.waiting) > 0 && in.loading == 0 && in.held == 0 {
				return fmt.Errorf("sim: %s stalled with %d waiting and %d running requests, %d of %d KV blocks free",
					in.name, len(in.waiting), len(in.running), in.kv.nfree, len(in.kv.blocks))
			}
			return nil
		}
		// Only preemptions this pass (the last running request preempted
		// itself): schedule again at once with the freed blocks.
	}
}

// recordAfterStep records what the step's entries cannot hold: the KV
// loads started, the encoder runs, and the prefills that waited for their
// encoder output (PREFILLING when the language model starts on them).
func (in *instance) recordAfterStep(work stepWork) {
	s := in.s
	for _, r := range in.kvWaits {
		s.reject(r.handle.Record(otelstats.Update{Kind: otelstats.KindRemoteKVWait, Side: otelstats.SideEngine,
			Time: vt(s.now), KVSource: in.cfg.PD.Prefill, NumRemoteTokens: r.remote}))
	}
	for i := range in.runs {
		run := &in.runs[i]
		s.reject(run.r.handle.Record(otelstats.Update{Kind: otelstats.KindEncoding, Side: otelstats.SideEngine,
			Time: vt(run.start), NumItems: run.items, NumEncoderTokens: run.tokens}))
		s.reject(run.r.handle.Record(otelstats.Update{Kind: otelstats.KindEncoded, Side: otelstats.SideEngine,
			Time: vt(run.end), EncoderCacheHit: run.hit}))
	}
	if len(in.late.Scheduled) == 0 {
		return
	}
	at := vt(s.now + int64(work.encode))
	in.late.Time = at
	for _, r := range in.lateReqs {
		in.scheduledTruth(r, at)
	}
	s.reject(in.tr.Step(&in.late))
}

// scheduledTruth notes that r's run started computing at at.
func (in *instance) scheduledTruth(r *request, at time.Time) {
	t := r.truth
	if t.FirstScheduled.IsZero() {
		t.FirstScheduled, t.CachedTokens = at, r.runCached
	} else if !r.preempted.IsZero() {
		t.RecomputeCachedTokens += r.runCached
		t.Preempted += waitInRequest(t, r.preempted, at)
		r.preempted = time.Time{}
	}
}

// waitInRequest is the part of the wait [from, to] before the request's
// end, when its frontend has ended it already (an abort the engine has not
// yet acted on).
func waitInRequest(t *Truth, from, to time.Time) time.Duration {
	if !t.Finish.IsZero() && t.Finish.Before(to) {
		to = t.Finish
	}
	return max(to.Sub(from), 0)
}

// schedule is vLLM V1's Scheduler.schedule: running requests first, in
// order, each getting the tokens it still needs (one to decode plus its
// draft tokens, or the rest of a chunked or recompute prefill) within the
// token budget, preempting from the back of the running list when the KV
// cache is full; then, if nothing was preempted, waiting requests in FCFS
// order with their prefix cache hits, until the budget, the KV cache or the
// running cap stops it. Images are encoded in the step whose chunk first
// covers them, within the encoder budget. It returns the step's work.
func (in *instance) schedule() stepWork {
	in.sched = in.sched[:0]
	budget, encBudget := in.cfg.MaxNumBatchedTokens, in.cfg.encoderBudget()
	var work stepWork
	preempted := false
	for i := 0; i < len(in.running) && budget > 0; {
		r := in.running[i]
		n, draft := min(r.numTokens()-r.computed, budget), 0
		var plan encodePlan
		if r.inPrefill {
			if n, plan = in.planEncode(r, r.computed, n, encBudget); n == 0 {
				i++ // its next chunk waits for the encoder budget
				continue
			}
		} else {
			draft = in.draftLen(r, budget-n)
		}
		ok := false
		for {
			if in.kv.allocate(r, nil, n+draft) {
				ok = true
				break
			}
			victim := in.running[len(in.running)-1]
			in.running = in.running[:len(in.running)-1]
			in.preempt(victim)
			preempted = true
			if victim == r {
				break
			}
		}
		if !ok {
			break
		}
		encBudget -= plan.budget
		in.addRun(r, plan, &work, false)
		in.take(r, n, draft, false)
		budget -= n + draft
		i++
	}
	if !preempted {
		in.admit(budget, encBudget, &work)
	}
	for _, r := range in.sched {
		if r.inPrefill {
			work.prefill += r.newTokens
		} else {
			work.decoding++
			work.verify += r.draft
			work.maxDraft = max(work.maxDraft, r.draft)
		}
	}
	return work
}

// admit takes waiting requests into the batch (the second half of
// schedule) within the budgets left.
func (in *instance) admit(budget, encBudget int, work *stepWork) {
	// Requests whose KV cache arrived go first: they were at the head of
	// the queue when their load started (vLLM keeps them in place).
	if len(in.ready) > 0 {
		in.waiting = append(in.ready, in.waiting...)
		in.ready = nil
	}
	skipped := in.skipped[:0]
admission:
	for len(in.waiting) > 0 && budget > 0 && len(in.running) < in.cfg.MaxNumSeqs {
		r := in.waiting[0]
		if r.adapter != "" && in.loras[r.adapter] == 0 && len(in.loras) >= in.cfg.MaxLoRAs {
			// vLLM skips a request whose adapter would exceed max_loras
			// and goes on with the next.
			in.waiting = in.waiting[1:]
			skipped = append(skipped, r)
			continue
		}
		if in.role == otelstats.PDRoleDecode && !r.transferred {
			switch in.startLoad(r) {
			case loadStarted:
				in.waiting = in.waiting[1:]
				continue
			case loadNoRoom:
				break admission
			}
			// Nothing to load: admitted as any request.
		}
		var hits []int32
		fresh := len(r.blocks) == 0
		base := r.computed
		if fresh {
			hits = in.kv.lookup(r)
			base = len(hits) * in.cfg.BlockSize
		}
		n, plan := in.planEncode(r, base, min(r.numTokens()-base, budget), encBudget)
		if n == 0 || !in.kv.allocate(r, hits, n) {
			break
		}
		in.waiting = in.waiting[1:]
		r.state = stRunning
		if fresh {
			r.computed, r.hashedBlocks, r.runCached = base, len(hits), base
		}
		in.running = append(in.running, r)
		if r.adapter != "" {
			in.loras[r.adapter]++
		}
		encBudget -= plan.budget
		late := plan.count() > 0
		in.addRun(r, plan, work, true)
		if late {
			in.lateReqs = append(in.lateReqs, r)
		} else {
			in.scheduledTruth(r, vt(in.s.now))
		}
		in.take(r, n, 0, late)
		budget -= n
	}
	if len(skipped) > 0 {
		// Back at the head of the queue, in their order. Insert copies
		// them, so the scratch slice can be cleared.
		in.waiting = slices.Insert(in.waiting, 0, skipped...)
	}
	clear(skipped)
	in.skipped = skipped[:0]
}

// take schedules n tokens of r (and draft tokens to verify) in this step.
// A prefill whose encoder runs first is reported late, when its encoder
// output is ready.
func (in *instance) take(r *request, n, draft int, late bool) {
	r.newTokens, r.draft = n, draft
	in.sched = append(in.sched, r)
	if r.inPrefill {
		e := otelstats.Scheduled{Req: r.handle, ComputedTokens: r.computed + n, CachedTokens: r.runCached}
		if late {
			in.late.Scheduled = append(in.late.Scheduled, e)
		} else {
			in.step.Scheduled = append(in.step.Scheduled, e)
		}
	}
}

// preempt evicts r (recompute preemption): its blocks are freed, it goes to
// the front of the waiting queue and will recompute prompt and generated
// tokens (and re-encode its images) when it resumes.
func (in *instance) preempt(r *request) {
	in.unrun(r)
	in.kv.free(r)
	r.computed, r.inPrefill, r.runCached, r.state = 0, true, 0, stWaiting
	for i := range r.images {
		r.images[i].encoded = false
	}
	r.preempted = vt(in.s.now)
	in.waiting = append(in.waiting, nil)
	copy(in.waiting[1:], in.waiting)
	in.waiting[0] = r
	in.step.PreemptedReqs = append(in.step.PreemptedReqs, r.handle)
	r.truth.Preemptions++
	in.preemptions++
	in.loadPreempted()
}

// endStep is the bottom of the loop: the forward pass is done; every request
// whose computed tokens caught up with its tokens samples one more (plus
// its accepted draft tokens), and those at their output length finish.
func (in *instance) endStep() {
	s := in.s
	in.resetStep()
	deliverAt := s.now + int64(in.cfg.Frontend.Deliver)
	finished := false
	for _, r := range in.sched {
		gained, accepted := 1, 0
		if r.inPrefill {
			r.computed += r.newTokens
			in.kv.commit(r)
			if r.computed < r.numTokens() {
				r.newTokens = 0
				continue // a chunk of a longer prefill
			}
			r.inPrefill = false
		} else {
			accepted = in.accept(r)
			gained += accepted
			r.computed += gained
			in.kv.commit(r)
		}
		r.out += gained
		if r.draft > 0 {
			in.step.SpecDecoded = append(in.step.SpecDecoded, otelstats.SpecDecoded{
				Req: r.handle, NewTokens: gained, DraftTokens: r.draft, AcceptedTokens: accepted})
			in.specTruth(r, accepted)
		} else {
			in.step.Decoded = append(in.step.Decoded, otelstats.Decoded{Req: r.handle, NewTokens: gained})
		}
		r.newTokens, r.draft = 0, 0
		last := r.out == r.maxOut
		s.push(event{at: deliverAt, kind: evDeliver, req: r.idx, inst: in.idx, n: int32(gained), last: last})
		if last {
			in.step.Finished = append(in.step.Finished, otelstats.Finished{Req: r.handle, Reason: r.reason})
			in.unrun(r)
			r.truth.EngineFinish = vt(s.now)
			finished = true
			if in.role == otelstats.PDRolePrefill {
				// NIXL-style: the blocks stay until the decode instance
				// has read them.
				r.state = stHeld
				in.held++
			} else {
				in.kv.free(r)
				r.state = stDone
			}
		}
	}
	if finished {
		in.running = slices.DeleteFunc(in.running, func(r *request) bool { return r.state != stRunning })
	}
	in.stats = otelstats.SchedulerStats{Running: len(in.running), Waiting: len(in.waiting) + len(in.inbox) + len(in.ready) + in.loading,
		KVCacheUsage: in.kv.usage()}
	in.step.Stats = &in.stats
	in.recordLoad(in.stats)
	s.reject(in.tr.Step(&in.step))
	in.busy = false
}
