// Package loadgen drives an otelstats.Tracker the way an inference engine
// does, as fast as asked, to measure span export: `llmtrace load` and the
// real-Jaeger tests in internal/e2e use it.
//
// One engine loop (one goroutine, like an engine's scheduler loop) records
// through the public API only. Each iteration is an engine step:
//
//  1. requests due arrive through the frontend handle (Tracker.Arrive,
//     InputProcessed);
//  2. a Step at schedule time: the new arrivals QUEUED, waiting requests
//     SCHEDULED (their whole prompt in one chunk) while the batch has room;
//  3. the model runs: the loop sleeps until the step's deadline (StepTime
//     after the previous one) — or not at all in flat-out mode;
//  4. a Step with the outputs: every running request DECODED one token, the
//     ones at OutputTokens FINISHED; then the frontend's DETOKENIZED for each
//     token and its FINISHED for each finished request.
//
// Every timestamp is the wall clock (time.Now) read at the step, so spans
// have real durations and the tracker's time-driven expiry behaves as in a
// live server. The time an iteration spends inside tracker calls is its
// step latency: the cost recording adds to the engine loop, and the proof
// that the loop never waits on export.
package loadgen

import (
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/llmtrace/llmtrace/otelstats"
)

// SpansPerRequest is how many spans one request of the default shape
// produces at the default detail level: the root, llm.input_processing,
// llm.queue, llm.prefill, llm.decode and llm.detokenize.
const SpansPerRequest = 6

// Config is one load level.
type Config struct {
	// Rate is the offered load in requests/s, paced by a token bucket
	// regardless of completions (open loop). 0 runs flat out: a closed
	// loop that keeps the batch full (admitting up to InFlight/OutputTokens
	// requests a step, so completions spread evenly over the steps) and
	// never sleeps (StepTime ignored).
	Rate float64
	// Duration is how long requests arrive; then the loop drains what is
	// in flight.
	Duration time.Duration
	// InFlight is the batch size: requests running at once (default 256).
	InFlight int
	// PromptTokens and OutputTokens shape each request (default 128 and 16).
	PromptTokens, OutputTokens int
	// StepTime is the simulated model time of one engine step when Rate > 0
	// (default 1 ms): steps run at most every StepTime.
	StepTime time.Duration
	// MaxWaiting bounds the engine's waiting queue; arrivals beyond it are
	// shed (refused before they reach the tracker, like a 429) and counted
	// (default 16 × InFlight).
	MaxWaiting int
	// Model is the requests' model name (default "load").
	Model string
}

func (c Config) withDefaults() Config {
	if c.InFlight <= 0 {
		c.InFlight = 256
	}
	if c.PromptTokens <= 0 {
		c.PromptTokens = 128
	}
	if c.OutputTokens <= 0 {
		c.OutputTokens = 16
	}
	if c.StepTime <= 0 && c.Rate > 0 {
		c.StepTime = time.Millisecond
	}
	if c.Rate <= 0 {
		c.StepTime = 0
	}
	if c.MaxWaiting <= 0 {
		c.MaxWaiting = 16 * c.InFlight
	}
	if c.Model == "" {
		c.Model = "load"
	}
	return c
}

// Result is what one level measured.
type Result struct {
	Config Config
	// Elapsed is the arrival window (Duration, or less when ctx ended).
	Elapsed time.Duration
	// Offered counts requests due in the window (arrived + shed); Shed
	// those refused because the waiting queue was full; Completed those
	// that finished within the window; Drained those that finished after
	// it; Waiting the fewest requests that waited unscheduled after a step
	// in the window's last quarter (an engine loop that keeps up drains its
	// waiting queue every few steps; one that falls behind grows it).
	Offered, Shed, Completed, Drained, Waiting int64
	// Rejected counts updates the tracker rejected (at least: a Step
	// reports up to eight).
	Rejected int64
	// Produced, Exported and Dropped are the span processor's counts for
	// this level, after its queue was flushed: Produced == Exported +
	// Dropped. ExportedInWindow is what had been exported when the window
	// closed; Backlog what was still queued or being exported then.
	Produced, Exported, Dropped int64
	ExportedInWindow, Backlog   int64
	// Flush is how long exporting the backlog took after the window.
	Flush time.Duration
	// Steps counts engine iterations in the window; StepP50, StepP99 and
	// StepMax are the time each spent inside tracker calls.
	Steps                     int64
	StepP50, StepP99, StepMax time.Duration
}

func perSec(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// OfferedRate is the requests/s offered in the window.
func (r Result) OfferedRate() float64 { return perSec(r.Offered, r.Elapsed) }

// CompletedRate is the requests/s completed in the window.
func (r Result) CompletedRate() float64 { return perSec(r.Completed, r.Elapsed) }

// SpanRate is the spans/s produced (every span of the level over the
// window: the drain's few spans included).
func (r Result) SpanRate() float64 { return perSec(r.Produced, r.Elapsed) }

// ExportRate is the spans/s that reached the exporter within the window.
func (r Result) ExportRate() float64 { return perSec(r.ExportedInWindow, r.Elapsed) }

// Sustained reports whether the level was kept up with: no span dropped,
// no update rejected, and the engine loop kept up with the arrivals — none
// shed, and the waiting queue down to at most one batch (InFlight) at some
// step of the window's last quarter. (An exporter that falls behind fills its queue, then drops; an
// engine loop that falls behind grows its waiting queue.)
func (r Result) Sustained() bool {
	return r.Dropped == 0 && r.Shed == 0 && r.Rejected == 0 && r.Waiting <= int64(r.Config.InFlight)
}

// Fields is the result as key=value pairs in a fixed order, for a
// parseable summary line.
func (r Result) Fields() []string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	us := func(d time.Duration) string { return strconv.FormatInt(d.Microseconds(), 10) }
	return []string{
		"rate=" + f(r.Config.Rate),
		"duration_s=" + strconv.FormatFloat(r.Elapsed.Seconds(), 'f', 2, 64),
		"in_flight=" + strconv.Itoa(r.Config.InFlight),
		"offered_rps=" + f(r.OfferedRate()),
		"completed_rps=" + f(r.CompletedRate()),
		"spans_per_s=" + f(r.SpanRate()),
		"exported_per_s=" + f(r.ExportRate()),
		"offered=" + i(r.Offered),
		"shed=" + i(r.Shed),
		"waiting=" + i(r.Waiting),
		"completed=" + i(r.Completed+r.Drained),
		"rejected=" + i(r.Rejected),
		"produced=" + i(r.Produced),
		"exported=" + i(r.Exported),
		"dropped=" + i(r.Dropped),
		"backlog=" + i(r.Backlog),
		"flush_ms=" + strconv.FormatInt(r.Flush.Milliseconds(), 10),
		"steps=" + i(r.Steps),
		"step_p50_us=" + us(r.StepP50),
		"step_p99_us=" + us(r.StepP99),
		"step_max_us=" + us(r.StepMax),
		"sustained=" + strconv.FormatBool(r.Sustained()),
	}
}

// Counter is the span processor being measured.
// *batch.Processor is one.
type Counter interface {
	Counts() (produced, exported, dropped int64)
	ForceFlush(ctx context.Context) error
}

// Runner runs load levels against one tracker. Run and FindMax must not
// be called concurrently; Progress may be, from any goroutine.
type Runner struct {
	tr  *otelstats.Tracker
	bp  Counter
	seq int64

	offered, completed, steps atomic.Int64
}

// New returns a Runner driving tr and measuring bp, the span processor of
// tr's TracerProvider.
func New(tr *otelstats.Tracker, bp Counter) *Runner { return &Runner{tr: tr, bp: bp} }

// Progress is a snapshot of the running level, safe to call from any
// goroutine: requests offered and completed, engine steps so far.
func (r *Runner) Progress() (offered, completed, steps int64) {
	return r.offered.Load(), r.completed.Load(), r.steps.Load()
}

type request struct {
	q      *otelstats.Request
	id     string
	tokens int
}

// maxSamples bounds the step latencies kept per level (8 MB); the maximum
// is tracked beyond it.
const maxSamples = 1 << 20

// Run runs one level: arrivals for c.Duration (or until ctx ends), then
// the requests in flight drain, then the span processor is flushed (for at
// most 60 s). It returns what it measured.
func (r *Runner) Run(ctx context.Context, c Config) (Result, error) {
	if c.Duration <= 0 {
		return Result{}, errors.New("loadgen: the duration must be positive")
	}
	if c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) {
		return Result{}, errors.New("loadgen: the rate must be a finite number ≥ 0")
	}
	c = c.withDefaults()
	res := Result{Config: c}
	r.offered.Store(0)
	r.completed.Store(0)
	r.steps.Store(0)
	p0, e0, d0 := r.bp.Counts()

	var (
		waiting  []*request // FIFO: waiting[head:]
		head     int
		running  = make([]*request, 0, c.InFlight)
		queued   = make([]*otelstats.Request, 0, c.InFlight)
		sched    = make([]otelstats.Scheduled, 0, c.InFlight)
		dec      = make([]otelstats.Decoded, 0, c.InFlight)
		fin      = make([]otelstats.Finished, 0, c.InFlight)
		lat      = make([]time.Duration, 0, 1<<12)
		stepMax  time.Duration
		rejected int64
		inWindow = true
		minWait  = int64(math.MaxInt64)
	)
	countErr := func(err error) {
		if err == nil {
			return
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			rejected += int64(len(j.Unwrap()))
			return
		}
		rejected++
	}
	prefix := "load-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-"

	start := time.Now()
	end := start.Add(c.Duration)
	next := start // the next step's output deadline when paced
	for {
		tA := time.Now()
		if inWindow && (!tA.Before(end) || ctx.Err() != nil) {
			inWindow = false
			res.Elapsed = tA.Sub(start)
			p1, e1, d1 := r.bp.Counts()
			res.ExportedInWindow = e1 - e0
			res.Backlog = (p1 - p0) - (e1 - e0) - (d1 - d0)
		}
		if !inWindow && len(running) == 0 && head == len(waiting) {
			break
		}

		// 1. Arrivals due.
		due := 0
		if inWindow {
			if c.Rate > 0 {
				due = int(int64(c.Rate*tA.Sub(start).Seconds()) - res.Offered)
			} else {
				// Keep the batch full, admitting at most one
				// OutputTokens-th of it per step, so that completions
				// spread over the steps instead of a whole batch
				// arriving and finishing in lockstep.
				due = min(c.InFlight-len(running)-(len(waiting)-head), (c.InFlight+c.OutputTokens-1)/c.OutputTokens)
			}
		}
		if due <= 0 && len(running) == 0 && head == len(waiting) && c.Rate > 0 {
			// Idle: sleep until the next arrival is due.
			at := start.Add(time.Duration(float64(res.Offered+1) / c.Rate * float64(time.Second)))
			if at.After(end) {
				at = end
			}
			sleepUntil(ctx, at)
			continue
		}
		var busy time.Duration
		t0 := time.Now()
		queued = queued[:0]
		for range max(due, 0) {
			res.Offered++
			if len(waiting)-head >= c.MaxWaiting {
				res.Shed++
				continue
			}
			r.seq++
			id := prefix + strconv.FormatInt(r.seq, 10)
			q, err := r.tr.Arrive(ctx, id, otelstats.Arrival{Time: tA, Model: c.Model})
			countErr(err)
			countErr(q.InputProcessed(tA, c.PromptTokens, nil))
			waiting = append(waiting, &request{q: q, id: id})
			queued = append(queued, q)
		}
		r.offered.Store(res.Offered)

		// 2. Schedule.
		sched = sched[:0]
		for len(running) < c.InFlight && head < len(waiting) {
			q := waiting[head]
			waiting[head] = nil
			head++
			running = append(running, q)
			sched = append(sched, otelstats.Scheduled{Req: q.q, ComputedTokens: c.PromptTokens})
		}
		if head == len(waiting) {
			waiting, head = waiting[:0], 0
		} else if head > 4096 && head > len(waiting)/2 {
			waiting, head = append(waiting[:0], waiting[head:]...), 0
		}
		if len(queued)+len(sched) > 0 {
			countErr(r.tr.Step(&otelstats.Step{Time: tA, QueuedReqs: queued, Scheduled: sched}))
		}
		busy += time.Since(t0)
		if inWindow && tA.After(end.Add(-c.Duration/4)) {
			minWait = min(minWait, int64(len(waiting)-head))
		}

		// 3. The model runs.
		if c.StepTime > 0 {
			next = next.Add(c.StepTime)
			if now := time.Now(); next.Before(now) {
				next = now // behind: no catching up in a burst
			} else {
				sleepUntil(context.Background(), next)
			}
		}

		// 4. Outputs.
		tB := time.Now()
		dec, fin = dec[:0], fin[:0]
		for _, q := range running {
			// By handle, as an engine that keeps it with its request
			// does: no id lookup per token.
			dec = append(dec, otelstats.Decoded{Req: q.q, NewTokens: 1})
			if q.tokens+1 >= c.OutputTokens {
				fin = append(fin, otelstats.Finished{Req: q.q, Reason: otelstats.FinishStop})
			}
		}
		countErr(r.tr.Step(&otelstats.Step{Time: tB, Decoded: dec, Finished: fin}))
		kept := running[:0]
		for _, q := range running {
			q.tokens++
			countErr(q.q.Detokenized(tB, 1, 0))
			if q.tokens >= c.OutputTokens {
				countErr(q.q.Finish(tB, otelstats.FinishStop))
				if inWindow {
					res.Completed++
				} else {
					res.Drained++
				}
				continue
			}
			kept = append(kept, q)
		}
		clear(running[len(kept):])
		running = kept
		busy += time.Since(tB)

		if inWindow {
			res.Steps++
			stepMax = max(stepMax, busy)
			if len(lat) < maxSamples {
				lat = append(lat, busy)
			}
			r.steps.Store(res.Steps)
			r.completed.Store(res.Completed)
		}
	}

	if minWait != math.MaxInt64 {
		res.Waiting = minWait
	}
	fctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	t0 := time.Now()
	ferr := r.bp.ForceFlush(fctx)
	res.Flush = time.Since(t0)
	p2, e2, d2 := r.bp.Counts()
	res.Produced, res.Exported, res.Dropped = p2-p0, e2-e0, d2-d0
	res.Rejected = rejected
	if len(lat) > 0 {
		slices.Sort(lat)
		res.StepP50 = lat[len(lat)/2]
		res.StepP99 = lat[len(lat)*99/100]
	}
	res.StepMax = stepMax
	if ferr != nil {
		return res, errors.New("loadgen: flushing the span processor: " + ferr.Error())
	}
	return res, nil
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

// FindMax searches for the highest offered rate that is Sustained: it
// starts at c.Rate (1000 when 0), doubles while levels are sustained, then
// bisects between the best sustained and the lowest failing rate until they
// are within 10 % or maxLevels levels ran. Each level runs c.Duration;
// report, when set, sees each level as it ends. It returns the best
// sustained level (zero Result if none) and every level.
func (r *Runner) FindMax(ctx context.Context, c Config, maxLevels int, report func(Result)) (Result, []Result, error) {
	rate := c.Rate
	if rate <= 0 {
		rate = 1000
	}
	var best Result
	var all []Result
	lo, hi := 0.0, math.Inf(1)
	for range maxLevels {
		if ctx.Err() != nil {
			break
		}
		c.Rate = math.Round(rate)
		res, err := r.Run(ctx, c)
		all = append(all, res)
		if report != nil {
			report(res)
		}
		if err != nil {
			return best, all, err
		}
		if ctx.Err() != nil {
			break // an interrupted level says nothing
		}
		if res.Sustained() {
			lo, best = c.Rate, res
		} else {
			hi = c.Rate
		}
		switch {
		case math.IsInf(hi, 1):
			rate = 2 * lo
		case lo == 0:
			rate = hi / 2
		default:
			rate = (lo + hi) / 2
		}
		if !math.IsInf(hi, 1) && hi-lo <= 0.1*hi || rate < 1 {
			break
		}
	}
	return best, all, nil
}
