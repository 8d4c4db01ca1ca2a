package loadgen

import (
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/llmtrace/llmtrace/otelstats"
)

// flushTimeout bounds the flush after a level's window; the level's ctx
// ends it sooner.
const flushTimeout = 60 * time.Second

// maxSamples bounds the step latencies kept per level (8 MB); the maximum
// is tracked beyond it.
const maxSamples = 1 << 20

// maxPrealloc bounds the capacity a level's per-step slices start with: a
// batch larger than that grows them as it fills, so an absurd InFlight
// costs nothing up front.
const maxPrealloc = 4096

// maxOffered caps what a paced level counts as offered, so that a rate no
// loop can take (-rate 1e20) saturates instead of overflowing int64.
const maxOffered = 1 << 62

// Run runs one level: arrivals for c.Duration (or until ctx ends), then
// the requests in flight drain (or, once ctx has ended, are aborted in one
// step), then the span processor is flushed (for at
// most 60 s, or until ctx ends: then Result.Pending says what the flush
// left). It returns what it measured.
func (r *Runner) Run(ctx context.Context, c Config) (Result, error) {
	if c.Duration <= 0 {
		return Result{}, errors.New("loadgen: the duration must be positive")
	}
	if c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) {
		return Result{}, errors.New("loadgen: the rate must be a finite number ≥ 0")
	}
	l := r.newLevel(c.withDefaults())
	for l.step(ctx) {
	}
	return l.finish(ctx)
}

type request struct {
	q      *otelstats.Request
	tokens int
}

// level is one Run's engine loop and what it measured so far.
type level struct {
	r   *Runner
	c   Config
	res Result

	start, end time.Time
	next       time.Time // the next step's output deadline when paced
	inWindow   bool
	prefix     string // of request ids: unique per level
	p0, e0, d0 int64  // the processor's counts at the start

	waiting []*request // FIFO: waiting[head:]
	head    int
	running []*request

	// Reused for every step's updates.
	queued []*otelstats.Request
	sched  []otelstats.Scheduled
	dec    []otelstats.Decoded
	fin    []otelstats.Finished

	lat      []time.Duration
	stepMax  time.Duration
	minWait  int64
	rejected int64
}

func (r *Runner) newLevel(c Config) *level {
	r.offered.Store(0)
	r.completed.Store(0)
	r.steps.Store(0)
	n := min(c.InFlight, maxPrealloc)
	l := &level{
		r: r, c: c, res: Result{Config: c},
		inWindow: true,
		prefix:   "load-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-",
		running:  make([]*request, 0, n),
		queued:   make([]*otelstats.Request, 0, n),
		sched:    make([]otelstats.Scheduled, 0, n),
		dec:      make([]otelstats.Decoded, 0, n),
		fin:      make([]otelstats.Finished, 0, n),
		lat:      make([]time.Duration, 0, 1<<12),
		minWait:  math.MaxInt64,
	}
	l.p0, l.e0, l.d0 = r.bp.Counts()
	l.start = time.Now()
	l.end, l.next = l.start.Add(c.Duration), l.start
	return l
}

// step runs one engine iteration: arrivals, the schedule step, the model
// time, the output step. It returns false when the window has closed and
// nothing is left in flight.
func (l *level) step(ctx context.Context) bool {
	tA := time.Now()
	if l.inWindow && (!tA.Before(l.end) || ctx.Err() != nil) {
		l.closeWindow(ctx, tA)
	}
	idle := len(l.running) == 0 && l.head == len(l.waiting)
	if !l.inWindow && (idle || ctx.Err() != nil) {
		if !idle {
			l.abort(tA)
		}
		return false
	}
	due := l.due(tA)
	if due <= 0 && idle && l.c.Rate > 0 {
		l.sleepUntilNextArrival(ctx)
		return true
	}
	t0 := time.Now()
	l.arrive(ctx, tA, due)
	l.schedule(tA)
	busy := time.Since(t0)
	l.modelTime(ctx)
	tB := time.Now()
	l.output(tB)
	l.record(busy + time.Since(tB))
	return true
}

// closeWindow ends the arrivals and notes what was exported by then.
func (l *level) closeWindow(ctx context.Context, t time.Time) {
	l.inWindow = false
	l.res.Elapsed = t.Sub(l.start)
	l.res.Interrupted = ctx.Err() != nil
	p1, e1, d1 := l.r.bp.Counts()
	l.res.ExportedInWindow = e1 - l.e0
	l.res.Backlog = (p1 - l.p0) - (e1 - l.e0) - (d1 - l.d0)
}

// due is how many requests arrive at t: paced, those the rate owes (the
// total saturating at maxOffered); flat out, enough to keep the batch
// full, admitting at most one OutputTokens-th of it per step so that
// completions spread over the steps instead of a whole batch arriving and
// finishing in lockstep.
func (l *level) due(t time.Time) int64 {
	switch {
	case !l.inWindow:
		return 0
	case l.c.Rate > 0:
		owed := l.c.Rate * t.Sub(l.start).Seconds()
		if !(owed < maxOffered) {
			owed = maxOffered
		}
		return int64(owed) - l.res.Offered
	}
	perStep := l.c.InFlight / l.c.OutputTokens // rounded up, without overflowing
	if l.c.InFlight%l.c.OutputTokens != 0 {
		perStep++
	}
	return int64(min(l.c.InFlight-len(l.running)-(len(l.waiting)-l.head), perStep))
}

// sleepUntilNextArrival idles until the rate owes the next request.
func (l *level) sleepUntilNextArrival(ctx context.Context) {
	at := l.end
	// In float seconds: at a tiny rate the next arrival is past any
	// time.Duration (and the window's end).
	if s := float64(l.res.Offered+1) / l.c.Rate; s < l.end.Sub(l.start).Seconds() {
		at = l.start.Add(time.Duration(s * float64(time.Second)))
	}
	sleepUntil(ctx, at)
}

// arrive admits n requests through the frontend handle while the waiting
// queue has room, and sheds the rest (counted at once: a rate far beyond
// the queue costs the loop nothing per shed request). Once ctx has ended
// it admits no more.
func (l *level) arrive(ctx context.Context, t time.Time, n int64) {
	l.queued = l.queued[:0]
	n = max(n, 0)
	admit := min(n, max(int64(l.c.MaxWaiting-(len(l.waiting)-l.head)), 0))
	l.res.Offered += n - admit
	l.res.Shed += n - admit
	for i := range admit {
		if i&1023 == 1023 && ctx.Err() != nil {
			break // an interrupt ends even a step that admits millions
		}
		l.res.Offered++
		l.r.seq++
		id := l.prefix + strconv.FormatInt(l.r.seq, 10)
		q, err := l.r.tr.Arrive(ctx, id, otelstats.Arrival{Time: t, Model: l.c.Model})
		l.count(err)
		l.count(q.InputProcessed(t, l.c.PromptTokens, nil))
		l.waiting = append(l.waiting, &request{q: q})
		l.queued = append(l.queued, q)
	}
	l.r.offered.Store(l.res.Offered)
}

// schedule moves waiting requests into the batch while it has room and
// records the step: the new arrivals QUEUED, the scheduled ones SCHEDULED
// with their whole prompt in one chunk.
func (l *level) schedule(t time.Time) {
	l.sched = l.sched[:0]
	for len(l.running) < l.c.InFlight && l.head < len(l.waiting) {
		q := l.waiting[l.head]
		l.waiting[l.head] = nil
		l.head++
		l.running = append(l.running, q)
		l.sched = append(l.sched, otelstats.Scheduled{Req: q.q, ComputedTokens: l.c.PromptTokens})
	}
	if l.head == len(l.waiting) {
		l.waiting, l.head = l.waiting[:0], 0
	} else if l.head > 4096 && l.head > len(l.waiting)/2 {
		l.waiting, l.head = append(l.waiting[:0], l.waiting[l.head:]...), 0
	}
	if len(l.queued)+len(l.sched) > 0 {
		l.count(l.r.tr.Step(&otelstats.Step{Time: t, QueuedReqs: l.queued, Scheduled: l.sched}))
	}
	if l.inWindow && t.After(l.end.Add(-l.c.Duration/4)) {
		l.minWait = min(l.minWait, int64(len(l.waiting)-l.head))
	}
}

// modelTime sleeps until the step's deadline, StepTime after the previous
// one, or until ctx ends (an interrupt ends the level at once, whatever
// StepTime is); a loop that is behind does not catch up in a burst.
func (l *level) modelTime(ctx context.Context) {
	if l.c.StepTime <= 0 {
		return
	}
	l.next = l.next.Add(l.c.StepTime)
	if now := time.Now(); l.next.Before(now) {
		l.next = now
		return
	}
	sleepUntil(ctx, l.next)
}

// output records the step's outputs: every running request DECODED one
// token (by handle, as an engine that keeps it with its request does: no
// id lookup per token), those at OutputTokens FINISHED; then the
// frontend's DETOKENIZED per token and FINISHED per finished request.
func (l *level) output(t time.Time) {
	l.dec, l.fin = l.dec[:0], l.fin[:0]
	for _, q := range l.running {
		l.dec = append(l.dec, otelstats.Decoded{Req: q.q, NewTokens: 1})
		if q.tokens+1 >= l.c.OutputTokens {
			l.fin = append(l.fin, otelstats.Finished{Req: q.q, Reason: otelstats.FinishStop})
		}
	}
	l.count(l.r.tr.Step(&otelstats.Step{Time: t, Decoded: l.dec, Finished: l.fin}))
	kept := l.running[:0]
	for _, q := range l.running {
		q.tokens++
		l.count(q.q.Detokenized(t, 1, 0))
		if q.tokens < l.c.OutputTokens {
			kept = append(kept, q)
			continue
		}
		l.count(q.q.Finish(t, otelstats.FinishStop))
		if l.inWindow {
			l.res.Completed++
		} else {
			l.res.Drained++
		}
	}
	clear(l.running[len(kept):])
	l.running = kept
}

// abort ends every request in flight at t, as an engine that is stopped
// does: once ctx has ended, a level is not drained token by token (which
// takes as many steps as OutputTokens) but ends at once. The engine
// records FINISHED abort for the batch and the waiting queue in one step,
// then the frontend its FINISHED abort for each.
func (l *level) abort(t time.Time) {
	l.fin = l.fin[:0]
	for _, q := range l.running {
		l.fin = append(l.fin, otelstats.Finished{Req: q.q, Reason: otelstats.FinishAbort})
	}
	for _, q := range l.waiting[l.head:] {
		l.fin = append(l.fin, otelstats.Finished{Req: q.q, Reason: otelstats.FinishAbort})
	}
	l.count(l.r.tr.Step(&otelstats.Step{Time: t, Finished: l.fin}))
	for _, f := range l.fin {
		l.count(f.Req.Finish(t, otelstats.FinishAbort))
	}
	clear(l.fin)
	clear(l.running)
	clear(l.waiting)
	l.fin, l.running, l.waiting, l.head = l.fin[:0], l.running[:0], l.waiting[:0], 0
}

// record keeps a step's latency: the time it spent inside tracker calls.
func (l *level) record(busy time.Duration) {
	if !l.inWindow {
		return
	}
	l.res.Steps++
	l.stepMax = max(l.stepMax, busy)
	if len(l.lat) < maxSamples {
		l.lat = append(l.lat, busy)
	}
	l.r.steps.Store(l.res.Steps)
	l.r.completed.Store(l.res.Completed)
}

// count counts the updates an error says the tracker rejected (a Step
// joins one error per rejected update).
func (l *level) count(err error) {
	if err == nil {
		return
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		l.rejected += int64(len(j.Unwrap()))
		return
	}
	l.rejected++
}

// finish flushes the span processor and completes the Result. A flush that
// ctx ended is no error: the level was interrupted, and Pending says what
// it left.
func (l *level) finish(ctx context.Context) (Result, error) {
	res := &l.res
	if l.minWait != math.MaxInt64 {
		res.Waiting = l.minWait
	}
	fctx, cancel := context.WithTimeout(ctx, flushTimeout)
	defer cancel()
	t0 := time.Now()
	ferr := l.r.bp.ForceFlush(fctx)
	res.Flush = time.Since(t0)
	p, e, d := l.r.bp.Counts()
	res.Produced, res.Exported, res.Dropped = p-l.p0, e-l.e0, d-l.d0
	res.Pending = res.Produced - res.Exported - res.Dropped
	res.Rejected = l.rejected
	if len(l.lat) > 0 {
		slices.Sort(l.lat)
		res.StepP50 = l.lat[len(l.lat)/2]
		res.StepP99 = l.lat[len(l.lat)*99/100]
	}
	res.StepMax = l.stepMax
	if ctx.Err() != nil {
		res.Interrupted = true
		return *res, nil
	}
	if ferr != nil {
		return *res, errors.New("loadgen: flushing the span processor: " + ferr.Error())
	}
	return *res, nil
}

// sleepUntil sleeps until t or until ctx ends.
func sleepUntil(ctx context.Context, t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
	case <-ctx.Done():
	}
}
