// Package loadgen drives an otelstats.Tracker the way an inference engine
// does, as fast as asked, to measure span export: `llmtrace load` and the
// real-Jaeger tests in e2e/export use it.
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
	"math"
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
		// Saturating: 16 × a huge InFlight wrapped negative, and every
		// arrival was shed.
		c.MaxWaiting = math.MaxInt
		if c.InFlight <= math.MaxInt/16 {
			c.MaxWaiting = 16 * c.InFlight
		}
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
	// this level, after its queue was flushed; Pending is what the flush
	// left neither exported nor dropped because ctx ended it (0 when it
	// completed): Produced == Exported + Dropped + Pending.
	// ExportedInWindow is what had been exported when the window closed;
	// Backlog what was still queued or being exported then.
	Produced, Exported, Dropped, Pending int64
	ExportedInWindow, Backlog            int64
	// Flush is how long exporting the backlog took after the window.
	Flush time.Duration
	// Interrupted is true when ctx ended the level before its window or
	// its flush did.
	Interrupted bool
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

// Sustained reports whether the level was kept up with: it ran to its
// end, no span was dropped or left pending, no update rejected, and the
// engine loop kept up with the arrivals — none shed, and the waiting queue
// down to at most one batch (InFlight) at some step of the window's last
// quarter. (An exporter that falls behind fills its queue, then drops; an
// engine loop that falls behind grows its waiting queue.)
func (r Result) Sustained() bool {
	return !r.Interrupted && r.Dropped == 0 && r.Pending == 0 && r.Shed == 0 && r.Rejected == 0 && r.Waiting <= int64(r.Config.InFlight)
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
		"pending=" + i(r.Pending),
		"backlog=" + i(r.Backlog),
		"flush_ms=" + strconv.FormatInt(r.Flush.Milliseconds(), 10),
		"steps=" + i(r.Steps),
		"step_p50_us=" + us(r.StepP50),
		"step_p99_us=" + us(r.StepP99),
		"step_max_us=" + us(r.StepMax),
		"sustained=" + strconv.FormatBool(r.Sustained()),
		"interrupted=" + strconv.FormatBool(r.Interrupted),
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
