package sim

import (
	"container/list"
	"time"

	"github.com/llmtrace/llmtrace/otelstats"
)

// Multimodal encoding.

// encodePlan is the images a chunk needs encoded: r.images[from:to], of
// which missTokens are not in the encoder cache and take budget.
type encodePlan struct {
	from, to   int
	tokens     int
	missTokens int
	budget     int
}

func (p encodePlan) count() int { return p.to - p.from }

// planEncode looks at the chunk of n tokens from base: every image whose
// placeholder overlaps it and whose encoder output the run lacks must be
// encoded in this step, within the encoder budget left. An image that does
// not fit cuts the chunk before it (vLLM's _try_schedule_encoder_inputs);
// n 0 means the request cannot be scheduled in this step.
func (in *instance) planEncode(r *request, base, n, encBudget int) (int, encodePlan) {
	var p encodePlan
	if len(r.images) == 0 {
		return n, p
	}
	p.from, p.to = -1, -1
	for k := range r.images {
		img := &r.images[k]
		start, end := int(img.start), int(img.start+img.tokens)
		if img.encoded || end <= base {
			continue
		}
		if start >= base+n {
			break
		}
		cost := int(img.tokens)
		if in.enc.has(img.id) {
			cost = 0
		}
		if cost > encBudget-p.budget {
			n = max(start-base, 0)
			break
		}
		if p.from < 0 {
			p.from = k
		}
		p.to = k + 1
		p.tokens += int(img.tokens)
		p.missTokens += cost
		p.budget += cost
	}
	if p.from < 0 {
		p.from, p.to = 0, 0
	}
	return n, p
}

// encoderRun is one ENCODING … ENCODED of a request in a step.
type encoderRun struct {
	r             *request
	start, end    int64
	items, tokens int
	hit           bool
}

// addRun runs the plan's encoder after the step's earlier runs: before
// the request's prefill (its first chunk) or during it.
func (in *instance) addRun(r *request, p encodePlan, w *stepWork, before bool) {
	if p.count() == 0 {
		return
	}
	c := in.cfg.Cost
	var d time.Duration
	if p.missTokens > 0 {
		d = c.EncodeRun + time.Duration(p.missTokens)*c.PerEncoderToken
	}
	start := in.s.now + int64(w.encode)
	w.encode += d
	for k := p.from; k < p.to; k++ {
		r.images[k].encoded = true
		in.enc.add(r.images[k].id)
	}
	run := encoderRun{r: r, start: start, end: start + int64(d), items: p.count(), tokens: p.tokens, hit: p.missTokens == 0}
	in.runs = append(in.runs, run)
	t := r.truth
	t.EncoderRuns++
	t.EncodeTime += d
	if run.hit {
		t.EncoderHits++
	}
	if before {
		t.EncodeBefore++
	} else {
		t.EncodeDuring++
	}
}

// encoderCache holds encoder outputs by image, least recently used out
// first.
type encoderCache struct {
	cap   int
	order *list.List // of uint64, front most recent
	at    map[uint64]*list.Element
}

func newEncoderCache(n int) *encoderCache {
	return &encoderCache{cap: n, order: list.New(), at: map[uint64]*list.Element{}}
}

func (c *encoderCache) has(id uint64) bool {
	_, ok := c.at[id]
	return ok
}

func (c *encoderCache) add(id uint64) {
	if c.cap == 0 {
		return
	}
	if e, ok := c.at[id]; ok {
		c.order.MoveToFront(e)
		return
	}
	c.at[id] = c.order.PushFront(id)
	for c.order.Len() > c.cap {
		old := c.order.Remove(c.order.Back()).(uint64)
		delete(c.at, old)
	}
}

// Speculative decoding.

// draftLen is how many tokens the draft proposes for r in this step: the
// draft length, but never past the output's end (the step yields accepted
// + 1 tokens) nor beyond the token budget left.
func (in *instance) draftLen(r *request, room int) int {
	k := in.cfg.Spec.K
	if k == 0 {
		return 0
	}
	return max(min(k, r.maxOut-r.out-1, room), 0)
}

// accept draws how many of r's draft tokens the target accepts: position
// i is accepted with probability Accept[i] when all before it were.
func (in *instance) accept(r *request) int {
	if r.draft == 0 {
		return 0
	}
	acc := in.cfg.Spec.Accept
	sp := &in.s.res.Spec
	sp.Steps++
	for i := range r.draft {
		sp.Drafted[i]++
	}
	n := 0
	for n < r.draft {
		sp.Reached[n]++
		p := acc[min(n, len(acc)-1)]
		if u := float64(splitmix64(r.uid^uint64(r.out)<<8^uint64(n)^0x73706563)>>11) / (1 << 53); u >= p {
			break
		}
		sp.Accepted[n]++
		n++
	}
	sp.DraftTokens += int64(r.draft)
	sp.Tokens += int64(n + 1)
	return n
}

func (in *instance) specTruth(r *request, accepted int) {
	t := r.truth
	t.DraftTokens += r.draft
	t.AcceptedTokens += accepted
	t.SpecSteps++
}

// Disaggregated prefill/decode: the decode instance's KV load.

type loadOutcome uint8

const (
	loadStarted   loadOutcome = iota
	loadNoRoom                // not enough free blocks: the queue waits
	loadNotNeeded             // everything but the last token is cached here
)

// startLoad begins loading r's prompt KV cache from the prefill instance
// (vLLM's WAITING_FOR_REMOTE_KVS): blocks for the prompt are allocated
// now, the tokens this instance's prefix cache lacks come over the link,
// and the request waits outside the batch until they arrived. The last
// prompt token is computed here, for its logits.
func (in *instance) startLoad(r *request) loadOutcome {
	hits := in.kv.lookup(r)
	cached := len(hits) * in.cfg.BlockSize
	remote := r.prompt - 1 - cached
	if remote <= 0 {
		r.transferred = true
		in.releases = append(in.releases, r.idx)
		return loadNotNeeded
	}
	if !in.kv.allocate(r, hits, remote) {
		return loadNoRoom
	}
	s := in.s
	r.hashedBlocks, r.runCached, r.remote = len(hits), cached, remote
	r.state = stLoading
	in.loading++
	t := r.truth
	t.KVSource, t.KVWait = in.cfg.PD.Prefill, vt(s.now)
	in.kvWaits = append(in.kvWaits, r)
	failed := float64(splitmix64(r.uid^0x6b766661696c)>>11)/(1<<53) < in.cfg.PD.FailureRate
	ev := event{at: s.now + int64(in.cfg.PD.TransferTime(remote)), kind: evKVDone, req: r.idx, inst: in.idx}
	if failed {
		ev.n = 1
	}
	s.push(ev)
	return loadStarted
}

// kvDone ends r's transfer: its tokens are computed (or, when it failed,
// will be recomputed here), and it waits for the scheduler again; the
// prefill instance frees its blocks.
func (in *instance) kvDone(r *request, failed bool) error {
	s := in.s
	in.loading--
	u := otelstats.Update{Kind: otelstats.KindRemoteKVReady, Side: otelstats.SideEngine, Time: vt(s.now)}
	if failed {
		u.KVStatus = otelstats.KVStatusFailed
		r.computed = r.runCached
	} else {
		u.NumRemoteTokens, u.KVBytes = r.remote, int64(r.remote)*in.cfg.PD.BytesPerToken
		r.computed = r.runCached + r.remote
		in.kv.commit(r)
	}
	s.reject(r.handle.Record(u))
	t := r.truth
	t.KVReady, t.RemoteTokens, t.KVBytes, t.KVFailed = vt(s.now), u.NumRemoteTokens, u.KVBytes, failed
	r.transferred, r.state = true, stWaiting
	in.ready = append(in.ready, r)
	return s.router.release(s, r.idx)
}

// Load over time.

// loadPoints bounds the series: when a run outgrows it, neighbouring points
// merge and each covers twice the time.
const (
	loadPoints = 480
	loadWidth0 = int64(250 * time.Millisecond)
)

// loadSeries is an instance's scheduler state over time, at most
// loadPoints points whatever the run's length.
type loadSeries struct {
	start, width int64
	pts          []LoadPoint
}

func (l *loadSeries) slot(start, at int64) *LoadPoint {
	if l.width == 0 {
		l.start, l.width = start, loadWidth0
	}
	i := (at - l.start) / l.width
	for i >= loadPoints {
		l.halve()
		i = (at - l.start) / l.width
	}
	for int64(len(l.pts)) <= i {
		l.pts = append(l.pts, LoadPoint{})
	}
	return &l.pts[max(i, 0)]
}

func (l *loadSeries) halve() {
	n := (len(l.pts) + 1) / 2
	for j := range n {
		p := l.pts[2*j]
		if 2*j+1 < len(l.pts) {
			q := l.pts[2*j+1]
			p.Running, p.Waiting = max(p.Running, q.Running), max(p.Waiting, q.Waiting)
			p.KVCacheUsage = max(p.KVCacheUsage, q.KVCacheUsage)
			p.Preemptions += q.Preemptions
		}
		l.pts[j] = p
	}
	l.pts = l.pts[:n]
	l.width *= 2
}

func (in *instance) recordLoad(st otelstats.SchedulerStats) {
	p := in.load.slot(in.s.virtStart, in.s.now)
	p.Running, p.Waiting = max(p.Running, st.Running), max(p.Waiting, st.Waiting)
	p.KVCacheUsage = max(p.KVCacheUsage, st.KVCacheUsage)
}

func (in *instance) loadPreempted() {
	in.load.slot(in.s.virtStart, in.s.now).Preemptions++
}

func (l *loadSeries) points() []LoadPoint {
	out := make([]LoadPoint, len(l.pts))
	for i, p := range l.pts {
		p.At = vt(l.start + int64(i)*l.width)
		out[i] = p
	}
	return out
}
