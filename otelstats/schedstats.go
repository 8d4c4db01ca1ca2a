package otelstats

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"
)

// SchedulerStats is what an engine's scheduler knows after a step (vLLM's
// SchedulerStats). It feeds the running/waiting/KV-cache gauges and the
// stats log line.
type SchedulerStats struct {
	Running int
	Waiting int
	// KVCacheUsage is the fraction of KV-cache blocks in use, 0 to 1.
	KVCacheUsage float64
	// PrefixCacheQueries and PrefixCacheHits are the prompt tokens looked up
	// in and served from the prefix cache during the step. When an engine
	// reports them, they feed llm.server.prefix_cache.* in place of the
	// per-request numbers, so nothing is counted twice.
	PrefixCacheQueries int64
	PrefixCacheHits    int64
}

// RecordSchedulerStats records one step's scheduler stats at time at. A
// report no scheduler can make — a negative count, a KV-cache usage outside
// 0–1 or not a number, more prefix-cache hits than queries — is rejected
// whole and counted (llm.rejected_updates): the gauges keep their last
// value and the counters stay monotonic.
func (t *Tracker) RecordSchedulerStats(at time.Time, s SchedulerStats) error {
	return t.recordSched(t.ns(at), &s)
}

func (t *Tracker) recordSched(ns int64, s *SchedulerStats) error {
	if r := checkSched(s); r != nil {
		t.stats.maybeLog(ns)
		return t.rejected(r)
	}
	ctx := context.Background()
	t.inst.running.Record(ctx, int64(s.Running), t.inst.gauge...)
	t.inst.waiting.Record(ctx, int64(s.Waiting), t.inst.gauge...)
	t.inst.kvUsage.Record(ctx, s.KVCacheUsage, t.inst.gauge...)
	if s.PrefixCacheQueries > 0 || s.PrefixCacheHits > 0 {
		t.schedCache.Store(true)
		if t.cfg.agg != nil {
			var c counts
			c.set(sPCQueries, s.PrefixCacheQueries)
			c.set(sPCHits, s.PrefixCacheHits)
			t.cfg.agg.addCounts(&c, t.inst.instance)
		} else {
			t.inst.pcQueries.Add(ctx, s.PrefixCacheQueries, t.inst.add...)
			t.inst.pcHits.Add(ctx, s.PrefixCacheHits, t.inst.add...)
		}
	}
	t.stats.mu.Lock()
	t.stats.running, t.stats.waiting, t.stats.kv, t.stats.sched = s.Running, s.Waiting, s.KVCacheUsage, true
	t.stats.mu.Unlock()
	t.stats.maybeLog(ns)
	return nil
}

// checkSched is the rejection of a scheduler report no scheduler can make,
// or nil.
func checkSched(s *SchedulerStats) *RejectError {
	var r Reason
	var detail string
	switch {
	case s.Running < 0 || s.Waiting < 0 || s.PrefixCacheQueries < 0 || s.PrefixCacheHits < 0:
		r, detail = ReasonNegativeCount, "a negative count"
	case !(s.KVCacheUsage >= 0 && s.KVCacheUsage <= 1): // NaN too
		r, detail = ReasonAbsurdCount, "kv-cache usage "+strconv.FormatFloat(s.KVCacheUsage, 'g', -1, 64)+" outside 0–1"
	case s.PrefixCacheHits > s.PrefixCacheQueries:
		r, detail = ReasonAbsurdCount, "more prefix-cache hits than queries"
	default:
		return nil
	}
	return &RejectError{Reason: r, Detail: "scheduler stats: " + detail}
}

// Stats is one interval of the periodic stats line, like vLLM's
// "Avg prompt throughput: … tokens/s, … Running: … reqs …".
type Stats struct {
	Time     time.Time
	Interval time.Duration
	// Throughputs in tokens per second over the interval.
	PromptThroughput     float64
	GenerationThroughput float64
	// Running, Waiting and KVCacheUsage are the latest scheduler stats
	// (RecordSchedulerStats, Step.Stats); not SchedulerValid before any
	// was recorded (an HTTP observer has none), when they are unknown.
	Running, Waiting int
	SchedulerValid   bool
	// Preemptions in the interval.
	Preemptions  int64
	KVCacheUsage float64
	// HitRate is the prefix-cache hits/queries over the last 1,000 finished
	// requests; not Valid before any request was scheduled.
	HitRate      float64
	HitRateValid bool
	// Finished requests in the interval.
	Finished int64
	// Speculative decoding of the requests finished in the interval (SPEC
	// §8): tokens drafted and accepted, and speculative steps.
	SpecDrafted, SpecAccepted, SpecSteps int64
	// KV transfers of the requests finished in the interval (SPEC §7): how
	// many, how many failed, their bytes and their summed time. KVBytesTime
	// sums the time of those that reported their bytes (kv_bytes is
	// optional), over which the line's MB/s is taken.
	KVTransfers, KVFailures int64
	KVBytes                 int64
	KVTime                  time.Duration
	KVBytesTime             time.Duration
}

func (s Stats) String() string {
	hr := "n/a"
	if s.HitRateValid {
		hr = fmt.Sprintf("%.1f%%", 100*s.HitRate)
	}
	running, waiting, kv := "n/a", "n/a", "n/a"
	if s.SchedulerValid {
		running, waiting = fmt.Sprintf("%d reqs", s.Running), fmt.Sprintf("%d reqs", s.Waiting)
		kv = fmt.Sprintf("%.1f%%", 100*s.KVCacheUsage)
	}
	line := fmt.Sprintf("Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, "+
		"Running: %s, Waiting: %s, Preemptions: %d, KV cache usage: %s, Prefix cache hit rate: %s",
		s.PromptThroughput, s.GenerationThroughput, running, waiting, s.Preemptions, kv, hr)
	// As vLLM's SpecDecoding and KV connector lines, when there was any.
	if s.SpecSteps > 0 && s.SpecDrafted > 0 {
		line += fmt.Sprintf(", Spec decode draft acceptance rate: %.1f%%, mean acceptance length: %.2f",
			100*float64(s.SpecAccepted)/float64(s.SpecDrafted), 1+float64(s.SpecAccepted)/float64(s.SpecSteps))
	}
	if s.KVTransfers > 0 {
		line += fmt.Sprintf(", KV transfer: %d transfers (%d failed), avg %.1f ms",
			s.KVTransfers, s.KVFailures, float64(s.KVTime)/1e6/float64(s.KVTransfers))
		if s.KVBytes > 0 && s.KVBytesTime > 0 {
			// Only the transfers that reported their bytes: one that
			// did not would make the rate a mix of sizes and zeros.
			line += fmt.Sprintf(", %.1f MB/s", float64(s.KVBytes)/1e6/s.KVBytesTime.Seconds())
		}
	}
	return line
}

const recentRequests = 1000

type statsLog struct {
	t *Tracker

	mu                     sync.Mutex
	last                   int64
	prompt, gen, preempts  int64 // shard sums at the last line
	finished, lastFinished int64
	running, waiting       int
	kv                     float64
	sched                  bool                     // scheduler stats were recorded: running, waiting and kv are known
	ring                   [recentRequests][2]int64 // queries, hits
	pos, filled            int
	serving                Stats // the interval's SPEC §7–8 sums, from finished requests
	latest                 Stats
}

// addServing adds a finished request's speculative and KV-transfer numbers
// to the interval.
func (l *statsLog) addServing(s *RequestStats) {
	if s.NumSpecSteps == 0 && s.KVSource == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	v := &l.serving
	v.SpecDrafted += int64(s.NumDraftTokens)
	v.SpecAccepted += int64(s.NumAcceptedTokens)
	v.SpecSteps += int64(s.NumSpecSteps)
	if s.KVSource != "" && s.KVTransferDuration.Valid { // an abort during the wait transferred nothing
		v.KVTransfers++
		v.KVBytes += s.KVTransferBytes
		v.KVTime += s.KVTransferDuration.Value
		if s.KVTransferBytes > 0 {
			v.KVBytesTime += s.KVTransferDuration.Value
		}
		if s.KVTransferFailed {
			v.KVFailures++
		}
	}
}

func newStatsLog(t *Tracker) *statsLog { return &statsLog{t: t} }

// counts are the prompt and generated tokens and the preemptions recorded
// so far, over the shards.
func (l *statsLog) counts() (prompt, gen, pre int64) {
	gen = l.t.stepGen.Load()
	for i := range l.t.shards {
		sh := &l.t.shards[i]
		prompt += sh.promptTok.Load()
		gen += sh.genTok.Load()
		pre += sh.preempts.Load()
	}
	return prompt, gen, pre
}

func (l *statsLog) addRequest(queries, hits int64) {
	l.mu.Lock()
	l.finished++
	if queries > 0 {
		l.ring[l.pos] = [2]int64{queries, hits}
		l.pos = (l.pos + 1) % recentRequests
		l.filled = min(l.filled+1, recentRequests)
	}
	l.mu.Unlock()
}

// maybeLog emits a line when an interval has passed since the last one.
func (l *statsLog) maybeLog(ns int64) {
	if l.t.cfg.logger == nil {
		return
	}
	l.mu.Lock()
	if l.last == 0 {
		// The first interval starts here: what was recorded before is
		// not in it.
		l.prompt, l.gen, l.preempts = l.counts()
		l.last, l.lastFinished = ns, l.finished
		l.serving = Stats{}
		l.mu.Unlock()
		return
	}
	iv := int64(l.t.cfg.statsInterval)
	if ns-l.last < iv {
		l.mu.Unlock()
		return
	}
	s := l.snapshot(ns)
	l.mu.Unlock()
	// The record carries the recorded time, not the wall clock, so a
	// simulation's or replay's lines are stamped with their own time.
	h := l.t.cfg.logger.Handler()
	ctx := context.Background()
	if !h.Enabled(ctx, slog.LevelInfo) {
		return
	}
	rec := slog.NewRecord(s.Time, slog.LevelInfo, s.String(), 0)
	rec.AddAttrs(
		slog.Float64("prompt_tokens_per_s", s.PromptThroughput),
		slog.Float64("generation_tokens_per_s", s.GenerationThroughput),
	)
	// Running, waiting and KV-cache usage are absent without scheduler
	// stats, never 0.
	if s.SchedulerValid {
		rec.AddAttrs(slog.Int("running", s.Running), slog.Int("waiting", s.Waiting))
	}
	rec.AddAttrs(slog.Int64("preemptions", s.Preemptions))
	if s.SchedulerValid {
		rec.AddAttrs(slog.Float64("kv_cache_usage", s.KVCacheUsage))
	}
	if s.HitRateValid { // absent before any request was scheduled, never 0
		rec.AddAttrs(slog.Float64("prefix_cache_hit_rate", s.HitRate))
	}
	_ = h.Handle(ctx, rec)
}

// snapshot computes the interval ending at ns and starts the next. Called
// with mu held.
func (l *statsLog) snapshot(ns int64) Stats {
	prompt, gen, pre := l.counts()
	secs := float64(ns-l.last) / 1e9
	s := Stats{
		Time:                 time.Unix(0, ns),
		Interval:             time.Duration(ns - l.last),
		PromptThroughput:     float64(prompt-l.prompt) / secs,
		GenerationThroughput: float64(gen-l.gen) / secs,
		Running:              l.running,
		Waiting:              l.waiting,
		SchedulerValid:       l.sched,
		Preemptions:          pre - l.preempts,
		KVCacheUsage:         l.kv,
		Finished:             l.finished - l.lastFinished,
		SpecDrafted:          l.serving.SpecDrafted,
		SpecAccepted:         l.serving.SpecAccepted,
		SpecSteps:            l.serving.SpecSteps,
		KVTransfers:          l.serving.KVTransfers,
		KVFailures:           l.serving.KVFailures,
		KVBytes:              l.serving.KVBytes,
		KVTime:               l.serving.KVTime,
		KVBytesTime:          l.serving.KVBytesTime,
	}
	l.serving = Stats{}
	var q, h int64
	for i := 0; i < l.filled; i++ {
		q += l.ring[i][0]
		h += l.ring[i][1]
	}
	if q > 0 {
		s.HitRate, s.HitRateValid = float64(h)/float64(q), true
	}
	l.prompt, l.gen, l.preempts, l.lastFinished, l.last = prompt, gen, pre, l.finished, ns
	l.latest = s
	return s
}

// LastStats returns the most recent stats interval that was logged.
func (t *Tracker) LastStats() Stats {
	t.stats.mu.Lock()
	defer t.stats.mu.Unlock()
	return t.stats.latest
}
