package otelstats

import (
	"context"
	"encoding/hex"
	"math"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/spans"
)

// treeBuf is reused across finalizations so building a span tree allocates
// little.
type treeBuf struct {
	tl     spans.Timeline
	tree   spans.Tree
	attrs  []attribute.KeyValue
	chunks []spans.ChunkEvent // every run's chunk events, back to back
	detok  spans.Detokenize
	stats  RequestStats
}

// finishReasons caches the root's gen_ai.response.finish_reasons attribute
// per reason: a string-slice attribute allocates twice to build.
var finishReasons sync.Map // string -> attribute.KeyValue

func finishReasonsAttr(reason string) attribute.KeyValue {
	if kv, ok := finishReasons.Load(reason); ok {
		return kv.(attribute.KeyValue)
	}
	kv := attributes.FinishReasons.StringSlice([]string{reason})
	if len(reason) <= MaxNameLength { // bounded: finish reasons are length-capped
		finishReasons.Store(reason, kv)
	}
	return kv
}

func tm(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// finalize materializes a request that left its shard: stats, metrics,
// spans, hooks. override is the finish reason when the tracker ended it
// (abandoned, evicted, unfinished) rather than a FINISHED update.
func (t *Tracker) finalize(r *reqState, override string) {
	t.inflight.Add(-1)
	t.settleDeliveries(r, math.MaxInt64) // no engine update comes any more
	tb := t.trees.Get().(*treeBuf)
	defer t.trees.Put(tb)

	// Pooled with the tree: hooks must not retain the pointer (WithOnFinish).
	s := &tb.stats
	t.materialize(r, override, s)

	var parent trace.SpanContext
	if r.extra != nil {
		parent = r.extra.parent
	}
	trusted := r.trusted && parent.IsValid()
	keep, why := t.sampler.decide(s, r.traceID, parent.IsSampled(), trusted)
	s.Sampled, s.SamplingReason = keep, why

	var sc trace.SpanContext
	if keep {
		t.buildTimeline(r, s, tb)
		tb.tree.Reset()
		spans.Build(&tb.tl, &tb.tree)
		if t.cfg.sp != nil {
			sc = tb.tree.Export(t.cfg.sp, t.src)
		} else {
			sc = tb.tree.Emit(context.Background(), t.tracer)
		}
		if tb.tree.Clamped > 0 {
			s.ClampedSpans = tb.tree.Clamped
			t.inst.clamped.Add(context.Background(), int64(tb.tree.Clamped))
		}
	}
	// Recording under the emitted root's span context lets the latency
	// histograms carry exemplars that point at kept traces; a dropped
	// trace's context is unsampled, so it leaves none.
	t.recordMetrics(sc, r, s)
	for _, f := range t.cfg.onFinish {
		f(s)
	}
}

// materialize computes RequestStats (SPEC §2) from r.
func (t *Tracker) materialize(r *reqState, override string, s *RequestStats) {
	end := r.feFinish
	if end == 0 {
		end = r.enFinish
	}
	if end == 0 {
		end = r.lastSeen
	}
	reason := r.feReason
	if reason == "" {
		reason = r.enReason
	}
	if reason == "" || (override != "" && r.feFinish == 0 && r.enFinish == 0) {
		reason = override
	}
	if override == FinishEvicted {
		reason = override
	}
	errType := r.errorType
	if errType == "" && isFailure(reason) {
		errType = reason
	}

	*s = RequestStats{
		RequestID:                r.id,
		Scope:                    r.scope,
		Model:                    r.model,
		Operation:                r.operation,
		FinishReason:             reason,
		ErrorType:                errType,
		ArrivalTime:              tm(r.arrived),
		FinishedTime:             tm(end),
		E2ELatency:               some(time.Duration(end - r.arrived)),
		NumPreemptions:           int(r.preemptions),
		NumRecomputeCachedTokens: int(r.recomputeCached),
	}
	if len(t.cfg.onFinish) > 0 {
		// Only hooks see RequestStats: format the ids for them alone.
		s.TraceID, s.SpanID = hex.EncodeToString(r.traceID[:]), hex.EncodeToString(r.spanID[:])
	}
	if r.prompt >= 0 {
		s.NumPromptTokens = Count{int(r.prompt), true}
	}
	if r.cached >= 0 {
		s.NumCachedTokens = Count{int(r.cached), true}
	}

	// The token time is the frontend's delivery; where no frontend reports
	// tokens, the engine's DECODING stands in.
	useFE := r.feDeliv > 0
	var first int64
	switch {
	case useFE:
		first, s.NumOutputTokens = r.feFirst, int(r.feTokens)
	case r.enDeliv > 0:
		first, s.NumOutputTokens = r.enFirst, int(r.enTokens)
	case r.feOneShot > 0:
		// Delivered in one piece: counted, but no token has a time.
		s.NumOutputTokens = int(r.feOneShot)
	}
	// SPEC §3: the values of §2 are the instants that bound the span tree,
	// whose children lie inside the root [ARRIVED, FINISHED]. Clamp each
	// instant into the root as spans.Build does, so that skew between the
	// two sides (or an engine token after the client's FINISHED) can never
	// make TTFT or a phase exceed e2e.
	lo, hi := r.arrived, max(end, r.arrived)
	in := func(ns int64) int64 { return min(max(ns, lo), hi) }
	firstQueued, firstPrefill := in(r.firstQueued), in(r.firstPrefill)
	if r.firstQueued != 0 && r.firstPrefill != 0 {
		s.QueueDuration = some(time.Duration(firstPrefill - firstQueued))
	}
	if first != 0 {
		first = in(first)
		s.FirstTokenLatency = some(time.Duration(first - r.arrived))
		s.DecodeLatency = some(time.Duration(end - first))
		if r.firstPrefill != 0 {
			s.PrefillLatency = some(time.Duration(first - firstPrefill))
		}
		if s.NumOutputTokens > 1 {
			s.TimePerOutputToken = some(s.DecodeLatency.Value / time.Duration(s.NumOutputTokens-1))
		}
	}
	if r.firstPrefill != 0 {
		s.InferenceLatency = some(time.Duration(end - firstPrefill))
	}
	pre := r.preemptedNs
	if cr := r.curRun(); cr != nil && cr.end != 0 {
		// Preempted and never resumed: the wait runs until the engine's
		// FINISHED, or the request's end.
		stop := r.enFinish
		if stop == 0 {
			stop = end
		}
		pre += max(stop-cr.end, 0)
	}
	s.PreemptedDuration = time.Duration(pre)
	if t.cfg.tokenLatencies {
		var l []time.Duration
		if r.extra != nil {
			l = r.extra.enITLs
			if useFE {
				l = r.extra.feITLs
			}
		}
		if l == nil {
			l = []time.Duration{}
		}
		s.OutputTokenLatencies = l
	}
}

func (t *Tracker) recordMetrics(sc trace.SpanContext, r *reqState, s *RequestStats) {
	model := t.models.label(r.model)
	as := t.inst.attrs(r.operation, model, s.FinishReason, s.ErrorType)
	var c counts
	c.set(sRequests, 1)
	if r.preemptions > 0 {
		c.set(sPreemptions, int64(r.preemptions))
	}
	if s.NumPromptTokens.Valid {
		c.set(sPromptTok, int64(s.NumPromptTokens.N))
	}
	if s.NumOutputTokens > 0 {
		c.set(sGenTok, int64(s.NumOutputTokens))
	}
	var queries, hits int64
	if s.NumCachedTokens.Valid && s.NumPromptTokens.Valid {
		queries, hits = int64(s.NumPromptTokens.N), int64(s.NumCachedTokens.N)
		if !t.schedCache.Load() {
			c.set(sPCQueries, queries)
			c.set(sPCHits, hits)
		}
	}
	h := &r.itl
	if t.cfg.agg != nil {
		t.cfg.agg.record(sc, s, h, as.baseSet, as.durationSet, as.finishedSet, &c)
	} else {
		// The SDK finds the exemplar's trace in the context.
		ctx := context.Background()
		if sc.IsValid() {
			ctx = trace.ContextWithSpanContext(ctx, sc)
		}
		t.recordHistograms(ctx, s, h, as)
		t.recordCounts(&c, as)
	}
	t.stats.addRequest(queries, hits)
}

// recordCounts adds a finished request's counts through the MeterProvider.
// Counters carry no exemplars (the latency histograms link to the trace),
// so they skip the exemplar filter's look at the context.
func (t *Tracker) recordCounts(c *counts, as *attrSets) {
	in, bg := t.inst, context.Background()
	for i, ctr := range [numSums]metric.Int64Counter{sRequests: in.requests, sPreemptions: in.preemptions,
		sPromptTok: in.promptTok, sGenTok: in.genTok, sPCQueries: in.pcQueries, sPCHits: in.pcHits} {
		switch {
		case !c.has[i]:
		case i == sRequests:
			ctr.Add(bg, c.v[i], as.finishedAdd...)
		default:
			ctr.Add(bg, c.v[i], as.baseAdd...)
		}
	}
}

// recordHistograms records the latency histograms through the MeterProvider.
func (t *Tracker) recordHistograms(ctx context.Context, s *RequestStats, h *itlHist, as *attrSets) {
	in := t.inst
	in.e2e.Record(ctx, s.E2ELatency.Value.Seconds(), as.durationRec...)
	rec := func(h metric.Float64Histogram, l Latency) {
		if l.Valid {
			h.Record(ctx, l.Value.Seconds(), as.baseRec...)
		}
	}
	rec(in.ttft, s.FirstTokenLatency)
	rec(in.tpot, s.TimePerOutputToken)
	rec(in.queue, s.QueueDuration)
	rec(in.prefill, s.PrefillLatency)
	rec(in.decode, s.DecodeLatency)
	rec(in.inference, s.InferenceLatency)
	// ITL gaps carry no exemplars: hundreds per request would only churn
	// the reservoir, and TTFT/TPOT/e2e already link to the trace.
	bg := context.Background()
	for i := range h.n {
		if c := h.n[i]; c > 0 {
			mean := float64(h.sum[i]) / float64(c) / 1e9
			for range c {
				in.itl.Record(bg, mean, as.baseRec...)
			}
		}
	}
}

// buildTimeline reduces r to the instants of its span tree.
func (t *Tracker) buildTimeline(r *reqState, s *RequestStats, tb *treeBuf) {
	tl := &tb.tl
	runs := tl.Runs[:0]
	tb.chunks = tb.chunks[:0]
	*tl = spans.Timeline{}
	tl.Name = attributes.RootSpanName(r.operation, r.model)
	tl.TraceID, tl.SpanID = r.traceID, r.spanID
	if r.extra != nil && r.extra.parent.IsValid() {
		tl.Parent = r.extra.parent
		if !r.trusted {
			// We decided to keep the trace; the caller's flag must not
			// make a parent-based SDK sampler drop it.
			tl.Parent = tl.Parent.WithTraceFlags(tl.Parent.TraceFlags().WithSampled(true))
		}
	}
	if r.extra != nil {
		tl.Link = r.extra.link
	}
	tl.RootOnly = r.detail == DetailRoot
	tl.Start, tl.End = s.ArrivalTime, s.FinishedTime
	tl.EngineEnd = tm(r.enFinish)
	tl.InputProcessed = tm(r.inputProcessed)
	tl.InputTokens = int(r.prompt)
	tl.FirstQueued = tm(r.firstQueued)

	useFE := r.feDeliv > 0
	for i := range r.runs {
		rr := &r.runs[i]
		first := rr.enFirst
		toks := rr.enTokens
		if useFE {
			fe, ft := rr.feFirst, rr.feTokens
			if i == 0 {
				// Deliveries recorded before the engine's first
				// PREFILLING reached us belong to the first run.
				fe, ft = r.feFirst, ft+r.preRunFE
			}
			if fe != 0 {
				first, toks = fe, ft
			}
		}
		run := spans.Run{
			Start:          tm(rr.start),
			FirstToken:     tm(first),
			Preempted:      tm(rr.end),
			ComputedTokens: int(rr.computed),
			CachedTokens:   int(rr.cached),
			Chunks:         int(rr.chunks),
			OutputTokens:   int(toks),
		}
		if len(rr.events) > 0 {
			j := len(tb.chunks)
			for _, ev := range rr.events {
				tb.chunks = append(tb.chunks, spans.ChunkEvent{Time: tm(ev.time), ComputedTokens: int(ev.computed)})
			}
			run.ChunkEvents = tb.chunks[j:len(tb.chunks):len(tb.chunks)]
		}
		if x := r.extra; x != nil && r.detail >= DetailSteps {
			lo, hi := rr.start, int64(math.MaxInt64)
			if i+1 < len(r.runs) {
				hi = r.runs[i+1].start
			}
			for _, st := range x.steps {
				if st.time >= lo && st.time < hi {
					run.Steps = append(run.Steps, spans.StepEvent{Time: tm(st.time), Index: st.index, BatchSize: int(st.batch)})
				}
			}
			if r.detail >= DetailTokens {
				if useFE {
					for _, d := range x.deliveries {
						if d >= lo && d < hi || i == 0 && d < lo {
							run.TokenTimes = append(run.TokenTimes, tm(d))
						}
					}
				} else {
					for _, st := range x.steps {
						if st.time >= lo && st.time < hi {
							run.TokenTimes = append(run.TokenTimes, tm(st.time))
						}
					}
				}
			}
		}
		runs = append(runs, run)
	}
	tl.Runs = runs
	if r.detokCount > 0 {
		tb.detok = spans.Detokenize{
			First: tm(r.detokFirst), Last: tm(r.detokLast),
			Busy: time.Duration(r.detokBusy), Deliveries: int(r.detokCount),
		}
		tl.Detokenize = &tb.detok
	}

	a := tb.attrs[:0]
	a = append(a,
		attributes.OperationName.String(r.operation),
		t.inst.provider,
		attributes.RequestModel.String(r.model),
		attributes.RequestID.String(r.id),
		attributes.UsageOutputTokens.Int(s.NumOutputTokens),
		finishReasonsAttr(s.FinishReason),
		attributes.Preemptions.Int(s.NumPreemptions),
	)
	if r.scope != "" {
		a = append(a, attributes.RequestScope.String(r.scope))
	}
	if s.NumPromptTokens.Valid {
		a = append(a, attributes.UsageInputTokens.Int(s.NumPromptTokens.N))
	}
	if s.NumCachedTokens.Valid {
		a = append(a, attributes.UsageCacheReadInput.Int(s.NumCachedTokens.N))
	}
	if s.NumRecomputeCachedTokens > 0 {
		a = append(a, attributes.RecomputeCachedTokens.Int(s.NumRecomputeCachedTokens))
	}
	lat := func(k attribute.Key, l Latency) {
		if l.Valid {
			a = append(a, k.Float64(l.Value.Seconds()))
		}
	}
	lat(attributes.LatencyTimeToFirstToken, s.FirstTokenLatency)
	lat(attributes.LatencyE2E, s.E2ELatency)
	lat(attributes.LatencyTimeInQueue, s.QueueDuration)
	lat(attributes.LatencyPrefill, s.PrefillLatency)
	lat(attributes.LatencyDecode, s.DecodeLatency)
	lat(attributes.LatencyInference, s.InferenceLatency)
	lat(attributes.TimePerOutputToken, s.TimePerOutputToken)
	if s.PreemptedDuration > 0 {
		a = append(a, attributes.PreemptedTime.Float64(s.PreemptedDuration.Seconds()))
	}
	if x := r.extra; x != nil {
		a = appendSampling(a, x.sampling)
		if x.input != "" {
			a = append(a, attributes.InputMessages.String(x.input))
		}
		if x.output != "" {
			a = append(a, attributes.OutputMessages.String(x.output))
		}
	}
	a = append(a, attributes.SamplingReason.String(s.SamplingReason))
	if s.ErrorType != "" {
		a = append(a, attributes.ErrorType.String(s.ErrorType))
		tl.Status, tl.StatusDesc = codes.Error, s.ErrorType
	}
	tb.attrs = a
	tl.RootAttrs = a
}

func appendSampling(a []attribute.KeyValue, p *SamplingParams) []attribute.KeyValue {
	if p == nil {
		return a
	}
	f := func(k attribute.Key, v *float64) {
		if v != nil {
			a = append(a, k.Float64(*v))
		}
	}
	i := func(k attribute.Key, v *int64) {
		if v != nil {
			a = append(a, k.Int64(*v))
		}
	}
	f(attributes.RequestTemperature, p.Temperature)
	f(attributes.RequestTopP, p.TopP)
	if p.TopK != nil { // a double in the registry
		a = append(a, attributes.RequestTopK.Float64(float64(*p.TopK)))
	}
	i(attributes.RequestMaxTokens, p.MaxTokens)
	i(attributes.RequestSeed, p.Seed)
	i(attributes.RequestChoiceCount, p.N)
	f(attributes.RequestFrequencyPenalty, p.FrequencyPenalty)
	f(attributes.RequestPresencePenalty, p.PresencePenalty)
	if len(p.Stop) > 0 {
		a = append(a, attributes.RequestStopSequences.StringSlice(p.Stop))
	}
	return a
}

// SpanContext returns the span context the root span of a request gets.
func spanContextOf(r *reqState) trace.SpanContext {
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    r.traceID,
		SpanID:     r.spanID,
		TraceFlags: trace.FlagsSampled,
	})
}
