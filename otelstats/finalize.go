package otelstats

import (
	"context"
	"encoding/hex"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
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
	kv     spans.KVTransfer
	stats  RequestStats
}

// finishReasons caches the root's gen_ai.response.finish_reasons attribute
// per reason: a string-slice attribute allocates twice to build. Reasons
// come from clients and engines, so the cache keeps the first
// maxFinishReasons of them; the rest are built each time.
var (
	finishReasons  sync.Map // string -> attribute.KeyValue
	finishReasonsN atomic.Int32
)

const maxFinishReasons = 64

// finishReasonsAttr is the root's gen_ai.response.finish_reasons: each
// choice's reason when the request has them, else the request's reason.
func finishReasonsAttr(reason string, choices []string) attribute.KeyValue {
	if len(choices) > 0 {
		return attributes.FinishReasons.StringSlice(choices)
	}
	if kv, ok := finishReasons.Load(reason); ok {
		return kv.(attribute.KeyValue)
	}
	kv := attributes.FinishReasons.StringSlice([]string{reason})
	if finishReasonsN.Load() < maxFinishReasons && finishReasonsN.Add(1) <= maxFinishReasons {
		if _, loaded := finishReasons.LoadOrStore(reason, kv); loaded {
			finishReasonsN.Add(-1)
		}
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
	keep, why := false, NotTraced
	if !t.cfg.noTraces {
		trusted := r.trusted && parent.IsValid()
		keep, why = t.sampler.decide(s, r.traceID, parent.IsSampled(), trusted)
		switch {
		case r.headDropped:
			// Decided at arrival, and told downstream: the policy (which
			// ran for its percentiles) cannot take it back.
			keep, why = false, NotSampled
		case why == SampledAll && t.cfg.head != nil:
			why = SampledHead
		}
	}
	s.Sampled, s.SamplingReason = keep, why

	var sc trace.SpanContext
	if keep {
		t.buildTimeline(r, s, tb)
		tb.tree.Reset()
		spans.Build(&tb.tl, &tb.tree)
		if t.cfg.sp != nil {
			sc = tb.tree.Export(t.cfg.sp, t.src)
		} else if sc = tb.tree.Emit(context.Background(), t.tracer); !sc.IsSampled() {
			// The SDK's sampler (OTEL_TRACES_SAMPLER) dropped the root, so
			// the trace is not kept: say so, or a layer adding spans of its
			// own to kept traces (openaihttp's proxy) would export them
			// under a root that never reaches the backend.
			s.Sampled, s.SamplingReason = false, NotSampled
		}
		if tb.tree.Clamped > 0 {
			s.ClampedSpans = tb.tree.Clamped
			t.inst.clamped.Add(context.Background(), int64(tb.tree.Clamped), t.inst.add...)
		}
	}
	// Recording under the emitted root's span context lets the latency
	// histograms carry exemplars that point at kept traces; a dropped
	// trace's context is unsampled, so it leaves none.
	t.recordMetrics(sc, r, s)
	for _, f := range t.cfg.onFinish {
		f(s)
	}
	if r.extra != nil && r.extra.onFinish != nil {
		r.extra.onFinish(s)
	}
}

// materialize computes RequestStats (SPEC §2, §7–9) from r.
func (t *Tracker) materialize(r *reqState, override string, s *RequestStats) {
	// The root ends no earlier than it starts (spans.Build clamps it):
	// skew can put an engine's FINISHED, which may end the request, before
	// the frontend's ARRIVED, and finished_time must be the root's end.
	end := max(r.endNs(), r.arrived)
	reason, errType := r.outcome(override)
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
		PDRole:                   r.pdRole.String(),
		LoRAAdapter:              r.adapter(),
	}
	if len(t.cfg.onFinish) > 0 || r.extra != nil && r.extra.onFinish != nil {
		// Only hooks see RequestStats: format the ids for them alone.
		s.TraceID, s.SpanID = hex.EncodeToString(r.traceID[:]), hex.EncodeToString(r.spanID[:])
	}
	if r.prompt >= 0 {
		s.NumPromptTokens = Count{int(r.prompt), true}
	}
	if r.cached >= 0 {
		s.NumCachedTokens = Count{int(r.cached), true}
	} else if r.feCached > 0 {
		// The engine's count at the first scheduling wins; without one,
		// the response's usage says what the server read from a cache.
		s.NumCachedTokens, s.CachedFromUsage = Count{int(r.feCached - 1), true}, true
	}
	if r.extra != nil && r.extra.finishReasons != nil && r.feFinish != 0 && reason == r.feReason {
		s.FinishReasons = r.extra.finishReasons
	}
	first := r.tokens(s)
	r.latencies(s, end, first)
	s.PreemptedDuration = time.Duration(r.preempted(end))
	if t.cfg.tokenLatencies && first != 0 {
		// Without a token time there are no gaps to tell: absent, as TTFT
		// is (SPEC §2), not an empty list.
		s.OutputTokenLatencies = r.tokenLatencies()
	}
	if r.extra != nil {
		r.serving(s, end, first)
	}
}

// end is the request's end: the frontend's FINISHED when it gave one (what
// the client saw), else the engine's, else the last update (a request the
// tracker ended).
func (r *reqState) endNs() int64 {
	switch {
	case r.feFinish != 0:
		return r.feFinish
	case r.enFinish != 0:
		return r.enFinish
	}
	return r.lastSeen()
}

// outcome is the request's finish reason and error type; override is the
// reason the tracker ended it with, if it did.
func (r *reqState) outcome(override string) (reason, errType string) {
	reason = r.feReason
	if reason == "" {
		reason = r.enReason
	}
	if reason == "" || override != "" && r.feFinish == 0 && r.enFinish == 0 || override == FinishEvicted {
		reason = override
	}
	// SPEC §3: status Error with error.type on a failure only. An error
	// type beside stop or length (a stray one, or the engine's failure
	// where the client saw the stream end well) does not make one.
	if !isFailure(reason) {
		return reason, ""
	}
	if errType = r.errorType; errType == "" {
		errType = reason
	}
	return reason, errType
}

// tokens sets the output token count and returns the first token time (0
// when no token has a time). The token time is the frontend's delivery;
// where no frontend reports tokens, the engine's DECODING stands in.
func (r *reqState) tokens(s *RequestStats) int64 {
	switch {
	case r.feDeliv > 0:
		s.NumOutputTokens = int(r.feTokens)
		return r.feFirst
	case r.enDeliv > 0:
		s.NumOutputTokens = int(r.enTokens)
		if r.tokensAfterClient() {
			return 0
		}
		if r.feOneShot > 0 {
			// A response in one piece: the engine's steps time its
			// tokens, the usage the client got counts them (SPEC §8:
			// delivered tokens).
			s.NumOutputTokens = int(r.feOneShot)
		}
		return r.enFirst
	case r.feOneShot > 0:
		// Delivered in one piece: counted, but no token has a time.
		s.NumOutputTokens = int(r.feOneShot)
	}
	return 0
}

// tokensAfterClient reports that the client's request failed (an abort,
// an error) before the engine's first token, and no frontend delivered
// one: the engine's tokens, made for a client that had left, reached no
// one. They count, as the engine made them, but have no token time — SPEC
// §2: an abort before the first token has no TTFT — and so no prefill,
// decode, TPOT or ITL, nor an llm.decode span. With the client's end a
// stop (an engine clock running ahead), or an engine token before the
// failure, the engine's times still stand in.
func (r *reqState) tokensAfterClient() bool {
	return r.feDeliv == 0 && r.enDeliv > 0 && r.feFinish != 0 && r.enFirst > r.feFinish && isFailure(r.feReason)
}

// latencies sets SPEC §2's derived durations. SPEC §3: they are the
// instants that bound the span tree, whose children lie inside the root
// [ARRIVED, FINISHED]; each instant is clamped into the root as spans.Build
// does, so that skew between the two sides (or an engine token after the
// client's FINISHED) can never make TTFT or a phase exceed e2e.
func (r *reqState) latencies(s *RequestStats, end, first int64) {
	in := func(ns int64) int64 { return r.inRoot(ns, end) }
	firstQueued, firstPrefill := in(r.firstQueued), in(r.firstPrefill)
	if r.firstQueued != 0 && r.firstPrefill != 0 {
		// SPEC §7: the transfer between the two waits is not queueing.
		// Its instants are clamped as the waits' are, so the value is
		// the two llm.queue spans around it.
		s.QueueDuration = some(time.Duration(firstPrefill - firstQueued - r.transferNs(end)))
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
}

// inRoot is ns clamped into the root [ARRIVED, end], as spans.Build clamps
// the children's instants.
func (r *reqState) inRoot(ns, end int64) int64 {
	return min(max(ns, r.arrived), max(end, r.arrived))
}

// transferNs is the completed KV transfer's duration, its instants clamped
// into the root [ARRIVED, end] as its llm.kv_transfer span's are, or 0.
func (r *reqState) transferNs(end int64) int64 {
	if kv := r.kv(); kv != nil && kv.ready != 0 {
		return max(r.inRoot(kv.ready, end)-r.inRoot(kv.wait, end), 0)
	}
	return 0
}

// preempted is the time spent preempted: every wait after a preemption,
// and for a request preempted and never resumed, until the engine's
// FINISHED or the request's end. Each wait's instants are clamped into the
// root [ARRIVED, end] as its llm.queue (preempted) span's are, so under
// skew the value is what the spans show. Past maxRuns, where later runs
// merge and have no spans, it is the engine's own sum, capped at e2e.
func (r *reqState) preempted(end int64) int64 {
	stop := r.enFinish
	if stop == 0 {
		stop = end
	}
	var pre int64
	if len(r.runs) >= maxRuns {
		pre = r.preemptedNs
		if cr := r.curRun(); cr.end != 0 {
			pre += max(stop-cr.end, 0)
		}
		return min(pre, max(end-r.arrived, 0))
	}
	for i := range r.runs {
		if e := r.runs[i].end; e != 0 {
			next := stop
			if i+1 < len(r.runs) {
				next = r.runs[i+1].start
			}
			pre += max(r.inRoot(next, end)-r.inRoot(e, end), 0)
		}
	}
	return pre
}

// tokenLatencies are the gaps of the stream that gave token times.
func (r *reqState) tokenLatencies() []time.Duration {
	var l []time.Duration
	if r.extra != nil {
		l = r.extra.enITLs
		if r.feDeliv > 0 {
			l = r.extra.feITLs
		}
	}
	if l == nil {
		l = []time.Duration{}
	}
	return l
}

// serving sets SPEC §7–9's values.
func (r *reqState) serving(s *RequestStats, end, first int64) {
	x := r.extra
	if kv := x.kv; kv != nil {
		s.KVSource, s.KVTransferBytes, s.KVTransferFailed = kv.source, kv.bytes, kv.failed
		if kv.ready != 0 {
			// SPEC §3: the span's instants, clamped into the root, so
			// skew cannot make the transfer exceed e2e or disagree with
			// its llm.kv_transfer span.
			s.KVTransferDuration = some(time.Duration(r.transferNs(end)))
			if !kv.failed {
				// SPEC §7: the tokens whose KV arrived. Until READY,
				// kv.tokens is the WAIT's expectation; a failed
				// transfer's tokens are recomputed, not remote.
				s.NumRemoteTokens = int(kv.tokens)
			}
		}
	}
	if rt := x.route; rt.prefillSent != 0 {
		// The router's instants are clamped into the root, as every
		// instant of the request is (SPEC §3, §5): a caller's clock
		// behind could otherwise make the decode TTFT exceed the TTFT.
		in := func(ns int64) int64 { return r.inRoot(ns, end) }
		s.PDPrefillDuration = some(time.Duration(in(rt.prefillDone) - in(rt.prefillSent)))
		if first != 0 {
			s.PDDecodeTTFT = some(time.Duration(in(first) - in(rt.decodeSent)))
		}
	}
	for i := range r.runs {
		s.NumDraftTokens += int(r.runs[i].draft)
		s.NumAcceptedTokens += int(r.runs[i].accepted)
		s.NumSpecSteps += int(r.runs[i].specSteps)
	}
	if s.NumSpecSteps > 0 {
		if s.NumDraftTokens > 0 {
			s.SpecAcceptanceRate = float64(s.NumAcceptedTokens) / float64(s.NumDraftTokens)
		}
		s.SpecMeanAcceptanceLength = 1 + float64(s.NumAcceptedTokens)/float64(s.NumSpecSteps)
	}
	if e := x.enc; e != nil {
		if e.open {
			e.closeAt(r.encEnd(r.enEnd()), r.arrived)
		}
		if e.n > 0 {
			// The runs that have spans count as their llm.encode spans
			// do, clamped into the root; later ones clamped too, as
			// far as what was kept of them tells.
			total := e.overflow(max(end, r.arrived))
			for _, er := range e.runs {
				total += r.inRoot(er.end, end) - r.inRoot(er.start, end)
			}
			s.EncodeDuration, s.NumEncoderRuns = some(time.Duration(total)), int(e.n)
		}
	}
}

// enEnd is when the engine's part ended: its FINISHED, or the request's
// end.
func (r *reqState) enEnd() int64 {
	if r.enFinish != 0 {
		return r.enFinish
	}
	return r.endNs()
}

func (t *Tracker) recordMetrics(sc trace.SpanContext, r *reqState, s *RequestStats) {
	ok := !isFailure(s.FinishReason)
	k := attrKey{op: t.ops.label(r.operation, true), model: t.models.label(r.model, ok), role: r.pdRole.String(),
		reason: t.reasons.label(s.FinishReason, true)}
	if s.ErrorType != "" {
		k.errType = t.errTypes.label(s.ErrorType, true)
	}
	if a := r.adapter(); a != "" {
		k.adapter = t.adapters.label(a, ok)
	}
	as := t.inst.attrs(k)
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
	if s.NumCachedTokens.Valid && s.NumPromptTokens.Valid && !s.CachedFromUsage {
		// SPEC §4: the engine's prefix-cache counters; a usage's cached
		// tokens (another server's cache) are not its queries or hits.
		queries, hits = int64(s.NumPromptTokens.N), int64(s.NumCachedTokens.N)
		if !t.schedCache.Load() {
			c.set(sPCQueries, queries)
			c.set(sPCHits, hits)
		}
	}
	if r.extra != nil {
		t.inst.serving.record(sc, s, r.extra.positions, as)
		t.stats.addServing(s)
	}
	h := &r.itl
	if r.tokensAfterClient() {
		*h = itlHist{} // gaps between tokens no one got
	}
	h.flush()
	if t.cfg.agg != nil {
		t.cfg.agg.record(sc, s, h, as.baseSet, as.durationSet, as.finishedSet, &c)
	} else {
		// The SDK finds the exemplar's trace in the context.
		t.recordHistograms(exemplarContext(sc), s, h, as)
		t.recordCounts(&c, as)
	}
	if r.en.last == 0 {
		observedThroughput(r, s)
	}
	t.stats.addRequest(queries, hits)
}

// observedThroughput adds to the stats log's throughput the tokens of a
// request no engine reported (an HTTP observer's: the middleware, the
// proxy), which no PREFILLING or DECODING counted: the output of a
// response in one piece (a stream's deliveries were counted as they came),
// and, once the response showed output, the prompt tokens the server
// computed (not those its usage says it read from a cache), as the engine's
// PREFILLINGs count them. A request that produced nothing may never have
// reached a model: its prompt is not throughput.
func observedThroughput(r *reqState, s *RequestStats) {
	if d := int64(s.NumOutputTokens) - r.feTokens; d > 0 {
		r.sh.genTok.Add(d)
	}
	if s.NumOutputTokens == 0 || !s.NumPromptTokens.Valid {
		return
	}
	p := s.NumPromptTokens.N
	if s.CachedFromUsage {
		p -= s.NumCachedTokens.N
	}
	if p > 0 {
		r.sh.promptTok.Add(int64(p))
	}
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
	// The smallest and the largest gap are recorded as they were, the
	// rest of their bucket at the rest's mean (which lies between the
	// bucket's remaining gaps), so min and max are exact, as the
	// Aggregator's, and counts and sums still are.
	if h.empty() {
		return
	}
	bg := context.Background()
	lo, hi := itlBucket(h.min), itlBucket(h.max)
	for i := range h.n {
		c, sum := int64(h.n[i]), h.sum[i]
		if c == 0 {
			continue
		}
		if i == lo {
			in.itl.Record(bg, float64(h.min)/1e9, as.baseRec...)
			c, sum = c-1, sum-h.min
		}
		if i == hi && c > 0 {
			in.itl.Record(bg, float64(h.max)/1e9, as.baseRec...)
			c, sum = c-1, sum-h.max
		}
		if c > 0 {
			mean := float64(sum) / float64(c) / 1e9
			for range c {
				in.itl.Record(bg, mean, as.baseRec...)
			}
		}
	}
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
// It carries the caller's tracestate on, as the exported root does: W3C
// Trace Context has every participant propagate it, and the vendors'
// entries in it are lost downstream otherwise.
func spanContextOf(r *reqState) trace.SpanContext {
	var ts trace.TraceState
	if r.hasParent {
		ts = r.extra.parent.TraceState()
	}
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    r.traceID,
		SpanID:     r.spanID,
		TraceFlags: r.parentFlags | headFlags(r.headDropped),
		TraceState: ts,
	})
}

// headFlags are the flags of a root's span context: sampled unless the
// head sampler dropped the trace (the end-of-request policy decides later
// than anyone downstream can be told).
func headFlags(dropped bool) trace.TraceFlags {
	if dropped {
		return 0
	}
	return trace.FlagsSampled
}
