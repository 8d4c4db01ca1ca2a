package otelstats

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/internal/textcap"
)

type instruments struct {
	ttft, tpot, e2e, itl                 metric.Float64Histogram
	queue, prefill, decode, inference    metric.Float64Histogram
	requests, preemptions                metric.Int64Counter
	promptTok, genTok, pcQueries, pcHits metric.Int64Counter
	running, waiting                     metric.Int64Gauge
	kvUsage                              metric.Float64Gauge
	rejected, dropped, clamped, evicted  metric.Int64Counter
	truncated                            metric.Int64Counter
	serving                              servingInstruments

	provider attribute.KeyValue // gen_ai.provider.name, on every request metric
	// gauge is the scheduler gauges' attribute option (llm.pd.role of a
	// WithPDRole tracker), empty otherwise; instance and add are that role
	// for the instance's other counters (SPEC §7: on every instance
	// histogram and counter), the empty set and no option otherwise.
	gauge    []metric.RecordOption
	instance attribute.Set
	add      []metric.AddOption
	role     []attribute.KeyValue // the role alone, to join other attributes

	mu      sync.Mutex
	sets    map[attrKey]*attrSets
	reasons sync.Map // Reason → metric.MeasurementOption
}

type attrKey struct{ op, model, adapter, role, reason, errType string }

// attrSets are the precomputed attribute sets of one kind of request, so
// recording a finished request allocates no attributes.
type attrSets struct {
	baseSet, durationSet, finishedSet attribute.Set

	// Option slices built once: passing an existing slice to a variadic
	// Add or Record does not allocate; passing single options does, once
	// per call, as the slice escapes through the instrument interface.
	baseAdd     []metric.AddOption    // operation, model
	baseRec     []metric.RecordOption // operation, model
	durationRec []metric.RecordOption // + error.type on failures
	finishedAdd []metric.AddOption    // + finish reason
}

func newInstruments(mp metric.MeterProvider, ownHistograms bool, provider string) (*instruments, error) {
	m := mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version()))
	in := &instruments{sets: make(map[attrKey]*attrSets), provider: attributes.ProviderName.String(provider)}
	mk := &maker{m: m}
	hist := func(dst *metric.Float64Histogram, name, desc string, bounds []float64) {
		if !ownHistograms {
			mk.hist(dst, name, attributes.UnitSeconds, desc, bounds)
		}
	}
	counter := mk.counter
	// The per-request counters: the Aggregator's when there is one.
	perRequest := func(dst *metric.Int64Counter, name, unit, desc string) {
		if !ownHistograms {
			mk.counter(dst, name, unit, desc)
		}
	}
	in.serving.init(mk)
	hist(&in.ttft, attributes.MetricTimeToFirstToken, "Time to first token.", attributes.TimeToFirstTokenBuckets())
	hist(&in.tpot, attributes.MetricTimePerOutputToken, "Time per output token after the first.", attributes.TimePerOutputTokenBuckets())
	hist(&in.e2e, attributes.MetricRequestDuration, "End-to-end request duration.", attributes.RequestDurationBuckets())
	hist(&in.itl, attributes.MetricInterTokenLatency, "Gap between successive token deliveries.", attributes.InterTokenLatencyBuckets())
	hist(&in.queue, attributes.MetricQueueDuration, "Time in the waiting queue before the first scheduling.", attributes.PhaseDurationBuckets())
	hist(&in.prefill, attributes.MetricPrefillDuration, "First scheduling to first token.", attributes.PhaseDurationBuckets())
	hist(&in.decode, attributes.MetricDecodeDuration, "First token to finish.", attributes.PhaseDurationBuckets())
	hist(&in.inference, attributes.MetricInferenceDuration, "First scheduling to finish.", attributes.PhaseDurationBuckets())
	perRequest(&in.requests, attributes.MetricRequests, attributes.UnitRequest, "Finished requests by finish reason.")
	perRequest(&in.preemptions, attributes.MetricPreemptions, attributes.UnitPreempt, "Preemptions of running requests.")
	perRequest(&in.promptTok, attributes.MetricPromptTokens, attributes.UnitToken, "Prompt tokens of finished requests.")
	perRequest(&in.genTok, attributes.MetricGenerationTokens, attributes.UnitToken, "Generated tokens of finished requests.")
	perRequest(&in.pcQueries, attributes.MetricPrefixCacheQuery, attributes.UnitToken, "Prompt tokens looked up in the prefix cache.")
	perRequest(&in.pcHits, attributes.MetricPrefixCacheHits, attributes.UnitToken, "Prompt tokens served from the prefix cache.")
	counter(&in.rejected, attributes.MetricRejectedUpdates, attributes.UnitUpdate, "Lifecycle updates rejected, by reason.")
	counter(&in.dropped, attributes.MetricSpansDropped, attributes.UnitSpan, "Spans that could not be exported.")
	counter(&in.clamped, attributes.MetricSpansClamped, attributes.UnitSpan, "Spans clamped into their root: clock skew between processes, or an engine run that ended after the request (a client abort the engine saw later).")
	counter(&in.evicted, attributes.MetricRequestsEvicted, attributes.UnitRequest, "Requests evicted at the in-flight cap.")
	counter(&in.truncated, attributes.MetricAttributesTruncated, "{attribute}", "Client-supplied strings cut at their cap, or with invalid UTF-8 replaced, before they became attributes, by llm.truncated.key.")
	err := mk.err
	if err != nil {
		return nil, err
	}
	if in.running, err = m.Int64Gauge(attributes.MetricRequestsRunning, metric.WithUnit(attributes.UnitRequest),
		metric.WithDescription("Requests in the running batch, per engine step.")); err != nil {
		return nil, err
	}
	if in.waiting, err = m.Int64Gauge(attributes.MetricRequestsWaiting, metric.WithUnit(attributes.UnitRequest),
		metric.WithDescription("Requests waiting to be scheduled, per engine step.")); err != nil {
		return nil, err
	}
	if in.kvUsage, err = m.Float64Gauge(attributes.MetricKVCacheUsage, metric.WithUnit(attributes.UnitRatio),
		metric.WithDescription("Fraction of KV-cache blocks in use, per engine step.")); err != nil {
		return nil, err
	}
	return in, nil
}

// attrs are the attribute sets of a finished request's metrics: the
// operation, the provider, the model, the LoRA adapter and the P/D role
// (each when there is one), and for some instruments the finish reason or
// error type. k's model and adapter are already labels (modelSet.label).
func (in *instruments) attrs(k attrKey) *attrSets {
	in.mu.Lock()
	s, ok := in.sets[k]
	if !ok {
		base := []attribute.KeyValue{attributes.OperationName.String(k.op), in.provider, attributes.RequestModel.String(k.model)}
		if k.adapter != "" {
			base = append(base, attributes.LoRAAdapter.String(k.adapter))
		}
		if k.role != "" {
			base = append(base, attributes.PDRole.String(k.role))
		}
		errType, reason := k.errType, k.reason
		dur := base
		if errType != "" {
			dur = append(append([]attribute.KeyValue(nil), base...), attributes.ErrorType.String(errType))
		}
		fin := append(append([]attribute.KeyValue(nil), base...), attributes.FinishReason.String(reason))
		bs, ds := attribute.NewSet(base...), attribute.NewSet(dur...)
		fs := attribute.NewSet(fin...)
		b, fo := metric.WithAttributeSet(bs), metric.WithAttributeSet(fs)
		s = &attrSets{
			baseSet:     bs,
			durationSet: ds,
			finishedSet: fs,
			baseAdd:     []metric.AddOption{b},
			baseRec:     []metric.RecordOption{b},
			durationRec: []metric.RecordOption{metric.WithAttributeSet(ds)},
			finishedAdd: []metric.AddOption{fo},
		}
		// The key space is bounded: models collapse to "other" past the
		// configured set, and reasons and error types are length-capped,
		// but a hostile producer could still invent reasons; cap the cache.
		if len(in.sets) < 4096 {
			in.sets[k] = s
		}
	}
	in.mu.Unlock()
	return s
}

// setRole puts a WithPDRole tracker's role on its instance-wide
// instruments.
func (in *instruments) setRole(role string) {
	in.role = []attribute.KeyValue{attributes.PDRole.String(role)}
	in.instance = attribute.NewSet(in.role...)
	in.gauge = []metric.RecordOption{metric.WithAttributeSet(in.instance)}
	in.add = []metric.AddOption{metric.WithAttributeSet(in.instance)}
}

// withInstance is the set of kv and the instance's role, if any.
func (in *instruments) withInstance(kv attribute.KeyValue) attribute.Set {
	return attribute.NewSet(append([]attribute.KeyValue{kv}, in.role...)...)
}

// countTruncated counts a value of key cut at its cap.
func (in *instruments) countTruncated(key attribute.Key) {
	in.truncated.Add(context.Background(), 1, metric.WithAttributeSet(in.withInstance(attributes.TruncatedKey.String(string(key)))))
}

func (in *instruments) countReject(r Reason) {
	o, ok := in.reasons.Load(r)
	if !ok {
		o, _ = in.reasons.LoadOrStore(r, metric.WithAttributeSet(in.withInstance(attributes.RejectionReason.String(string(r)))))
	}
	in.rejected.Add(context.Background(), 1, o.(metric.MeasurementOption))
}

// modelSet decides which model (or adapter) names keep their name on
// metrics; any other is "other". A configured set is fixed. Without one,
// a name earns its series when a request with it finishes without failing,
// up to the limit: a client sending junk model names gets errors from the
// engine (model not found), so junk cannot crowd the real models out
// (issue 12.9) unless the engine serves it.
type modelSet struct {
	fixed bool
	limit int
	mu    sync.RWMutex
	names map[string]struct{}
}

func newModelSet(models []string, limit int) *modelSet {
	s := &modelSet{names: make(map[string]struct{}), limit: limit, fixed: len(models) > 0}
	for _, m := range models {
		// As an arriving name is cut and cleaned (capNames): a configured
		// name past the cap, or not UTF-8, could never match otherwise.
		m, _ = textcap.Clean(m, MaxModelLength)
		s.names[m] = struct{}{}
	}
	return s
}

// newLabelSet bounds a free-form metric label (the operation, the finish
// reason, the error type; SPEC §4: low-cardinality attributes): the seeded
// values and the first extra distinct others keep their name, any later one
// is "other". A producer inventing a reason per request gets one series.
func newLabelSet(seed []string, extra int) *modelSet {
	s := newModelSet(seed, len(seed)+extra)
	s.fixed = false
	return s
}

// Label sets' seeds: the values users see everywhere, so an early flood of
// invented ones cannot crowd them out.
var (
	seedOperations = []string{"chat", "text_completion", "embeddings", "generate_content", "execute_tool",
		"create_agent", "invoke_agent"}
	seedReasons = []string{FinishStop, FinishLength, FinishAbort, FinishError, FinishAbandoned, FinishEvicted,
		FinishUnfinished, "remote_decode", "tool_calls", "content_filter", "function_call"}
)

// Distinct values past the seeds that keep their name on metrics.
const (
	maxExtraOperations = 16
	maxExtraReasons    = 16
	maxErrorTypes      = 64
)

// label is model's metric label; succeeded says its request did not fail,
// which is what admits a new name.
func (s *modelSet) label(model string, succeeded bool) string {
	s.mu.RLock()
	_, ok := s.names[model]
	n := len(s.names)
	s.mu.RUnlock()
	if ok {
		return model
	}
	if s.fixed || !succeeded || n >= s.limit {
		return attributes.OtherModel
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.names) >= s.limit {
		return attributes.OtherModel
	}
	s.names[model] = struct{}{}
	return model
}

// maker creates instruments on one meter, keeping the first error.
type maker struct {
	m   metric.Meter
	err error
}

func (k *maker) hist(dst *metric.Float64Histogram, name, unit, desc string, bounds []float64) {
	if k.err == nil {
		*dst, k.err = k.m.Float64Histogram(name, metric.WithDescription(desc), metric.WithUnit(unit),
			metric.WithExplicitBucketBoundaries(bounds...))
	}
}

func (k *maker) counter(dst *metric.Int64Counter, name, unit, desc string) {
	if k.err == nil {
		*dst, k.err = k.m.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit(unit))
	}
}
