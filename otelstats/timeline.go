package otelstats

import (
	"math"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/spans"
)

// buildTimeline reduces r to the instants of its span tree, in tb's reused
// buffers.
func (t *Tracker) buildTimeline(r *reqState, s *RequestStats, tb *treeBuf) {
	tl := &tb.tl
	runs, encodes := tl.Runs[:0], tl.Encodes[:0]
	tb.chunks = tb.chunks[:0]
	*tl = spans.Timeline{
		Name:    attributes.RootSpanName(r.operation, r.model),
		TraceID: r.traceID, SpanID: r.spanID,
		RootOnly:       r.detail == DetailRoot,
		Start:          r.arrived,
		End:            r.endNs(),
		EngineEnd:      r.enFinish,
		InputProcessed: r.inputProcessed,
		InputTokens:    int(r.prompt),
		FirstQueued:    r.firstQueued,
	}
	if x := r.extra; x != nil {
		tl.Parent, tl.Link = x.parent, x.link
		if tl.Parent.IsValid() && !r.trusted {
			// We decided to keep the trace; the caller's flag must not
			// make a parent-based SDK sampler drop it.
			tl.Parent = tl.Parent.WithTraceFlags(tl.Parent.TraceFlags().WithSampled(true))
		}
		if kv := x.kv; kv != nil {
			tb.kv = spans.KVTransfer{Wait: kv.wait, Ready: kv.ready, Source: kv.source,
				Tokens: int(kv.tokens), Bytes: kv.bytes, Failed: kv.failed}
			tl.KVTransfer = &tb.kv
		}
		if e := x.enc; e != nil {
			for _, er := range e.runs {
				encodes = append(encodes, spans.Encode{Start: er.start, End: er.end,
					Items: int(er.items), Tokens: int(er.tokens), CacheHit: er.hit})
			}
		}
	}
	tl.Encodes = encodes
	var delivered uint64 // bit i: run i's first token is a delivery (maxRuns is 64)
	for i := range r.runs {
		run, fe := t.timelineRun(r, i, tb)
		if fe {
			delivered |= 1 << i
		}
		runs = append(runs, run)
	}
	if r.extra != nil && r.detail >= DetailTokens && r.feDeliv > 0 {
		placeDeliveries(r.extra.deliveries, runs, delivered)
	}
	tl.Runs = runs
	if r.detokCount > 0 {
		tb.detok = spans.Detokenize{
			First: r.detokFirst, Last: r.detokLast,
			Busy: time.Duration(r.detokBusy), Deliveries: int(r.detokCount),
		}
		tl.Detokenize = &tb.detok
	}
	tb.attrs = t.rootAttrs(r, s, tb.attrs[:0])
	tl.RootAttrs = tb.attrs
	if s.ErrorType != "" {
		tl.Status, tl.StatusDesc = codes.Error, s.ErrorType
	}
}

// timelineRun is run i of r as the span builder takes it, and whether its
// first token is the frontend's delivery.
func (t *Tracker) timelineRun(r *reqState, i int, tb *treeBuf) (spans.Run, bool) {
	rr := &r.runs[i]
	first, toks, delivered := rr.enFirst, rr.enTokens, false
	if r.tokensAfterClient() {
		first = 0 // no token reached the client: no decode segment
	}
	if r.feDeliv > 0 {
		fe, ft := rr.feFirst, rr.feTokens
		if n, holdsFirst := r.unplacedShare(i); n > 0 {
			ft += n
			if holdsFirst {
				fe = r.feFirst
			} else if fe == 0 || rr.enFirst != 0 && rr.enFirst < fe {
				fe = rr.enFirst // the delivery's own time was not kept
			}
		}
		if fe != 0 {
			first, toks, delivered = fe, ft, true
		}
	}
	run := spans.Run{
		Start:          rr.start,
		FirstToken:     first,
		Preempted:      rr.end,
		ComputedTokens: int(rr.computed),
		CachedTokens:   int(rr.cached),
		Chunks:         int(rr.chunks),
		OutputTokens:   int(toks),
		DraftTokens:    int(rr.draft),
		AcceptedTokens: int(rr.accepted),
		SpecSteps:      int(rr.specSteps),
	}
	if kv := r.kv(); i == 0 && kv != nil && !kv.failed {
		run.RemoteTokens = int(kv.tokens)
	}
	if len(rr.events) > 0 {
		j := len(tb.chunks)
		for _, ev := range rr.events {
			tb.chunks = append(tb.chunks, spans.ChunkEvent{Time: ev.time, ComputedTokens: int(ev.computed)})
		}
		run.ChunkEvents = tb.chunks[j:len(tb.chunks):len(tb.chunks)]
	}
	if r.extra != nil && r.detail >= DetailSteps {
		r.runDetail(i, &run)
	}
	return run, delivered
}

// runDetail adds detail levels 2 and 3 to run i: its engine steps, and,
// when no frontend delivered tokens, its token times from those steps
// (placeDeliveries places the frontend's).
func (r *reqState) runDetail(i int, run *spans.Run) {
	for _, st := range r.extra.steps {
		if int(st.run) == i {
			run.Steps = append(run.Steps, spans.StepEvent{Time: st.time, Index: st.index, BatchSize: int(st.batch)})
		}
	}
	if r.detail >= DetailTokens && r.feDeliv == 0 && !r.tokensAfterClient() {
		for _, st := range run.Steps {
			run.TokenTimes = append(run.TokenTimes, st.Time)
		}
	}
}

// placeDeliveries gives each run whose first token is a frontend delivery
// (bit i of delivered) its deliveries ds, in time order, as token times
// (DetailTokens). A delivery belongs to the run that made its tokens, and
// runs' tokens are delivered in run order, so a run's deliveries are those
// from its first token up to the next such run's first token — also those
// that came after the next run began (a run preempted and resumed before
// its last token reached the client). A window of the run's own engine
// time would hand those to the next segment, whose token count does not
// include them, at an offset before its start.
func placeDeliveries(ds []int64, runs []spans.Run, delivered uint64) {
	k := 0
	for i := range runs {
		if delivered&(1<<i) == 0 {
			continue
		}
		next := int64(math.MaxInt64)
		for j := i + 1; j < len(runs); j++ {
			if delivered&(1<<j) != 0 {
				next = runs[j].FirstToken
				break
			}
		}
		from := k
		for k < len(ds) && ds[k] < next {
			k++
		}
		runs[i].TokenTimes = ds[from:k:k]
	}
}

// unplacedShare is run i's share of the deliveries recorded before any
// engine update of the request reached us, while the engine was not
// present (r.preRunFE: their times were not kept, see pendDelivery). They
// are the request's earliest tokens, so they fill the runs in order, each
// up to what the engine counted in it beyond the deliveries placed there;
// what is left goes to the last run that took some, or the first. first
// says run i holds the request's first delivery, whose time is kept.
func (r *reqState) unplacedShare(i int) (n int64, first bool) {
	if r.preRunFE == 0 {
		return 0, false
	}
	left, took, firstRun := r.preRunFE, 0, -1
	var mine int64
	for j := range r.runs {
		rj := &r.runs[j]
		c := min(left, max(rj.enTokens-rj.feTokens, 0))
		if c == 0 {
			continue
		}
		left -= c
		took = j
		if firstRun < 0 {
			firstRun = j
		}
		if j == i {
			mine = c
		}
	}
	if firstRun < 0 {
		firstRun = 0
	}
	if i == took {
		mine += left
	}
	return mine, i == firstRun
}

// rootAttrs appends the root span's attributes to a: the GenAI keys, the
// shared gen_ai.latency.* durations, the sampling params and SPEC §7–9's.
func (t *Tracker) rootAttrs(r *reqState, s *RequestStats, a []attribute.KeyValue) []attribute.KeyValue {
	a = append(a,
		attributes.OperationName.String(r.operation),
		t.inst.provider,
		attributes.RequestModel.String(r.model),
		t.cleanAttr(attributes.RequestID, r.id),
		attributes.UsageOutputTokens.Int(s.NumOutputTokens),
		finishReasonsAttr(s.FinishReason, s.FinishReasons),
		attributes.Preemptions.Int(s.NumPreemptions),
	)
	if len(s.FinishReasons) > 1 {
		// The choices' reasons do not say which is the request's (the
		// choice that finished last): readers of the span, such as the
		// fleet connector, take it from here, as the metrics have it.
		a = append(a, attributes.FinishReason.String(s.FinishReason))
	}
	if r.scope != "" {
		a = append(a, t.cleanAttr(attributes.RequestScope, r.scope))
	}
	if s.NumPromptTokens.Valid {
		a = append(a, attributes.UsageInputTokens.Int(s.NumPromptTokens.N))
	}
	if s.NumCachedTokens.Valid {
		a = append(a, attributes.UsageCacheReadInput.Int(s.NumCachedTokens.N))
		if s.NumPromptTokens.Valid && s.NumPromptTokens.N > 0 && !s.CachedFromUsage {
			a = append(a, attributes.PrefixCacheHitRatio.Float64(float64(s.NumCachedTokens.N)/float64(s.NumPromptTokens.N)))
		}
	}
	if s.NumRecomputeCachedTokens > 0 {
		a = append(a, attributes.RecomputeCachedTokens.Int(s.NumRecomputeCachedTokens))
	}
	a = appendLatencies(a, s)
	if x := r.extra; x != nil {
		a = appendSampling(a, x.sampling)
		if x.input != "" {
			a = append(a, attributes.InputMessages.String(x.input))
		}
		if len(x.output) > 0 && t.cfg.content != nil {
			a = append(a, attributes.OutputMessages.String(t.cfg.content.outputJSON(x.output, x.finishReasons, s.FinishReason)))
		}
		a = append(a, x.attrs...)
	}
	a = appendServingAttrs(a, s)
	a = append(a, attributes.SamplingReason.String(s.SamplingReason))
	if s.ErrorType != "" {
		a = append(a, attributes.ErrorType.String(s.ErrorType))
	}
	return a
}

// appendLatencies appends the root's durations, in seconds, that happened.
func appendLatencies(a []attribute.KeyValue, s *RequestStats) []attribute.KeyValue {
	for _, l := range [...]struct {
		k attribute.Key
		v Latency
	}{
		{attributes.LatencyTimeToFirstToken, s.FirstTokenLatency},
		{attributes.LatencyE2E, s.E2ELatency},
		{attributes.LatencyTimeInQueue, s.QueueDuration},
		{attributes.LatencyPrefill, s.PrefillLatency},
		{attributes.LatencyDecode, s.DecodeLatency},
		{attributes.LatencyInference, s.InferenceLatency},
		{attributes.TimePerOutputToken, s.TimePerOutputToken},
		{attributes.LatencyKVTransfer, s.KVTransferDuration},
		{attributes.LatencyEncode, s.EncodeDuration},
		{attributes.PDPrefillDuration, s.PDPrefillDuration},
		{attributes.PDDecodeTTFT, s.PDDecodeTTFT},
	} {
		if l.v.Valid {
			a = append(a, l.k.Float64(l.v.Value.Seconds()))
		}
	}
	if s.NumPreemptions > 0 {
		// A preemption resumed at once (or clamped away by skew) took 0 s:
		// a value, not an absent one.
		a = append(a, attributes.PreemptedTime.Float64(s.PreemptedDuration.Seconds()))
	}
	return a
}

// appendServingAttrs appends SPEC §7–9's root attributes: the P/D role, the
// speculative totals, the adapter.
func appendServingAttrs(a []attribute.KeyValue, s *RequestStats) []attribute.KeyValue {
	if s.PDRole != "" {
		a = append(a, attributes.PDRole.String(s.PDRole))
	}
	if s.NumSpecSteps > 0 {
		a = append(a,
			attributes.SpecDraftTokens.Int(s.NumDraftTokens),
			attributes.SpecAcceptedTokens.Int(s.NumAcceptedTokens),
			attributes.SpecSteps.Int(s.NumSpecSteps),
			attributes.SpecAcceptanceRate.Float64(s.SpecAcceptanceRate),
			attributes.SpecMeanAcceptanceLength.Float64(s.SpecMeanAcceptanceLength),
		)
	}
	if s.LoRAAdapter != "" {
		a = append(a, attributes.LoRAAdapter.String(s.LoRAAdapter))
	}
	return a
}
