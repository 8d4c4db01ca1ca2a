package llmtraceconnector

import (
	"context"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/connector"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.uber.org/zap"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/internal/textcap"
	"github.com/llmtrace/llmtrace/otelcol/internal/spanread"
	"github.com/llmtrace/llmtrace/reconstruct"
)

// ScopeName is the instrumentation scope of the connector's metrics.
const ScopeName = "github.com/llmtrace/llmtrace/otelcol/llmtraceconnector"

// metricsConnector aggregates request spans into cumulative metrics. Its
// state is guarded by mu; ConsumeTraces may run concurrently.
type metricsConnector struct {
	cfg    *Config
	engine *reconstruct.Engine
	next   consumer.Metrics
	logger *zap.Logger

	mu        sync.Mutex
	resources map[string]*resourceState
	series    int               // across all resources and families
	latest    pcommon.Timestamp // the latest consume, which may start a series
	models    nameSet
	adapters  nameSet
	ops       nameSet // free-form labels, bounded as the tracker bounds them
	reasons   nameSet
	errTypes  nameSet
	providers nameSet
	key       []byte       // scratch for map keys
	recent    *recentSpans // nil: dedup_spans 0
	// duplicates counts request spans dropped as already counted, in the
	// collector's own telemetry.
	duplicates metric.Int64Counter

	stop   chan struct{}
	cancel context.CancelFunc // ends a periodic flush's hand-off
	done   chan struct{}
}

var _ connector.Traces = (*metricsConnector)(nil)

func newConnector(cfg *Config, e *reconstruct.Engine, next consumer.Metrics, logger *zap.Logger) *metricsConnector {
	return &metricsConnector{cfg: cfg, engine: e, next: next, logger: logger,
		resources: map[string]*resourceState{}, models: newNameSet(cfg.Models), adapters: newNameSet(cfg.Adapters),
		ops: newLabelSet(seedOperations), reasons: newLabelSet(seedReasons), errTypes: newLabelSet(nil),
		providers: newLabelSet(seedProviders), recent: newRecentSpans(cfg.DedupSpans),
		duplicates: noop.Int64Counter{}}
}

// duplicateSpansMetric is the collector telemetry counter of request spans
// the connector dropped because it had counted them already.
const duplicateSpansMetric = "otelcol_connector_llmtrace_metrics_duplicate_spans"

// setTelemetry creates the connector's own instruments with mp (the
// collector's telemetry). An instrument that fails stays a no-op: the
// connector's work never depends on its telemetry.
func (c *metricsConnector) setTelemetry(mp metric.MeterProvider) {
	d, err := mp.Meter(ScopeName).Int64Counter(duplicateSpansMetric, metric.WithUnit("{span}"),
		metric.WithDescription("Request spans not counted because the same trace and span id was counted recently (a re-delivered span)."))
	if err != nil {
		c.logger.Warn("llmtrace_metrics: cannot create the duplicate spans counter", zap.Error(err))
		return
	}
	c.duplicates = d
}

// Free-form labels (SPEC §4: low-cardinality attributes), bounded as the
// tracker bounds them: the seeds, the values users see everywhere, and
// the first few distinct others keep their name, any later one is
// "other". A producer inventing a reason per request gets one series.
var (
	seedOperations = []string{"chat", "text_completion", "embeddings", "generate_content", "execute_tool",
		"create_agent", "invoke_agent"}
	seedReasons = []string{"stop", "length", "abort", "error", "abandoned", "evicted",
		"unfinished", "remote_decode", "tool_calls", "content_filter", "function_call", "cancelled", "timeout"}
	// seedProviders are the engines' names, the provider of a span without
	// gen_ai.provider.name.
	seedProviders = []string{"vllm", "vllm-v0", "sglang", "tensorrt-llm", "llmtrace"}
)

const (
	maxExtraOperations = 16
	maxExtraReasons    = 16
	maxErrorTypes      = 64
	maxExtraProviders  = 16
)

func newLabelSet(seed []string) nameSet {
	s := newNameSet(seed)
	s.fixed = false
	return s
}

// nameSet decides which models (or adapters) keep their name on metrics,
// as the tracker does: a configured set is fixed; without one, a name
// earns its series when a request with it finishes without failing, up to
// max_models, so a client sending junk names (which fail) cannot crowd the
// real ones out.
type nameSet struct {
	names map[string]struct{}
	fixed bool
}

func newNameSet(configured []string) nameSet {
	s := nameSet{names: map[string]struct{}{}, fixed: len(configured) > 0}
	for _, n := range configured {
		// As an arriving name is cut and cleaned (reconstruct bounds it): a
		// configured name past the cap, or not UTF-8, could never match.
		n, _ = textcap.Clean(n, reconstruct.MaxNameLength)
		s.names[n] = struct{}{}
	}
	return s
}

// label is name's metric label; succeeded says its request did not fail.
func (s *nameSet) label(name string, succeeded bool, limit int) string {
	if name == "" {
		return ""
	}
	if _, ok := s.names[name]; ok {
		return name
	}
	if s.fixed || !succeeded || len(s.names) >= limit {
		return attributes.OtherModel
	}
	s.names[name] = struct{}{}
	return name
}

// Capabilities: the connector only reads spans.
func (c *metricsConnector) Capabilities() consumer.Capabilities {
	return consumer.Capabilities{MutatesData: false}
}

// Start begins the periodic flush.
func (c *metricsConnector) Start(context.Context, component.Host) error {
	if c.stop != nil {
		return nil // started already: a second flush goroutine would outlive Shutdown
	}
	ctx, cancel := context.WithCancel(context.Background())
	stop, done := make(chan struct{}), make(chan struct{})
	c.stop, c.cancel, c.done = stop, cancel, done
	go func() {
		defer close(done)
		tick := time.NewTicker(c.cfg.FlushInterval)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-tick.C:
				c.flush(ctx, now)
			}
		}
	}()
	return nil
}

// Shutdown stops the flush and emits the metrics one last time. A periodic
// flush still in the next consumer (a backend that is down, retried) is
// cancelled: the last flush carries its totals anyway.
func (c *metricsConnector) Shutdown(ctx context.Context) error {
	if c.stop == nil {
		return nil
	}
	close(c.stop)
	c.cancel()
	c.stop = nil
	select {
	case <-c.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	c.flush(ctx, time.Now())
	return nil
}

// ConsumeTraces records every request span of td.
func (c *metricsConnector) ConsumeTraces(_ context.Context, td ptrace.Traces) error {
	c.consume(td, time.Now())
	return nil
}

func (c *metricsConnector) consume(td ptrace.Traces, now time.Time) {
	if dups := c.consumeLocked(td, now); dups > 0 {
		c.duplicates.Add(context.Background(), dups)
	}
}

// consumeLocked records td's request spans under the lock and returns how
// many it dropped as already counted.
func (c *metricsConnector) consumeLocked(td ptrace.Traces, now time.Time) (dups int64) {
	ts := pcommon.NewTimestampFromTime(now)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.latest = max(c.latest, ts)
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		rs := rss.At(i)
		var state *resourceState
		sss := rs.ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			ss := sss.At(j)
			scope := ss.Scope().Name()
			if scope == reconstruct.ScopeName {
				continue // rebuilt children carry no request
			}
			sps := ss.Spans()
			for k := 0; k < sps.Len(); k++ {
				sp := sps.At(k)
				if _, child := sp.Attributes().Get(string(attributes.Reconstructed)); child {
					continue
				}
				in := spanread.Read(sp, scope)
				r, ok := reconstruct.Compute(&in, c.engineFor(sp, &in))
				if !ok {
					continue
				}
				if c.recent.seen(sp.TraceID(), sp.SpanID()) {
					dups++ // delivered again: counted already
					continue
				}
				if state == nil {
					state = c.resource(rs.Resource())
				}
				c.record(state, sp, &r, ts)
			}
		}
	}
	return dups
}

// engineFor is the mapping the processor applied (llm.reconstruct.engine),
// else the configured one (never for llmtrace's own roots), else the
// detected one.
func (c *metricsConnector) engineFor(sp ptrace.Span, in *reconstruct.Span) reconstruct.Engine {
	if v, ok := sp.Attributes().Get(string(attributes.ReconstructEngine)); ok {
		if e, ok := reconstruct.EngineByName(v.AsString()); ok {
			return e
		}
	}
	return reconstruct.Resolve(in, c.engine)
}

// maxResourceValueLength bounds a resource attribute's value on the
// metrics (service.name, service.instance.id: a Kubernetes name is at most
// 253 bytes): a sender's value is cut there on a rune boundary, and
// invalid UTF-8 is replaced, since a label that is not UTF-8 is refused.
const maxResourceValueLength = 256

func (c *metricsConnector) resource(res pcommon.Resource) *resourceState {
	c.key = c.key[:0]
	attrs := pcommon.NewMap()
	for _, k := range c.cfg.ResourceAttributes {
		c.key = append(c.key, k...)
		c.key = append(c.key, 0)
		if v, ok := res.Attributes().Get(k); ok {
			s, _ := textcap.Clean(v.AsString(), maxResourceValueLength)
			c.key = append(c.key, s...)
			attrs.PutStr(k, s)
		}
		c.key = append(c.key, 0)
	}
	if st, ok := c.resources[string(c.key)]; ok {
		return st
	}
	if c.series >= c.cfg.MaxSeries {
		// Past max_series a new resource (a new pod, a churned instance)
		// would bring its own overflow series: fold it into one.
		const overflowKey = "\x01overflow"
		if st, ok := c.resources[overflowKey]; ok {
			return st
		}
		attrs = pcommon.NewMap()
		attrs.PutBool("otel.metric.overflow", true)
		c.key = append(c.key[:0], overflowKey...)
	}
	st := &resourceState{attrs: attrs, base: map[string]*baseSeries{},
		duration: map[string]*durationSeries{}, requests: map[string]*requestSeries{}}
	c.resources[string(c.key)] = st
	return st
}

// isFailure reports whether a finish reason is a failure or an abort: the
// tracker's, and TensorRT-LLM's cancelled (its abort: a client gone) and
// timeout, which its spans give as they are.
func isFailure(reason string) bool {
	switch reason {
	case "abort", "error", "abandoned", "evicted", "unfinished", "cancelled", "timeout":
		return true
	}
	return false
}

// record adds one request to its resource's series.
func (c *metricsConnector) record(st *resourceState, sp ptrace.Span, r *reconstruct.Request, ts pcommon.Timestamp) {
	// An error status is a failure whatever the finish reason says (none,
	// or one written before the failure), as error.type below treats it:
	// such a request must not admit its model or adapter name, or failing
	// requests with invented names would take every max_models slot.
	ok := !isFailure(r.FinishReason) && !r.Failed
	l := labels{op: c.ops.label(r.Operation, true, len(seedOperations)+maxExtraOperations),
		provider: c.providers.label(r.Provider, true, len(seedProviders)+maxExtraProviders),
		model:    c.models.label(r.Model, ok, c.cfg.MaxModels), adapter: c.adapters.label(r.LoRAAdapter, ok, c.cfg.MaxModels),
		role: r.PDRole, reason: c.reasons.label(r.FinishReason, true, len(seedReasons)+maxExtraReasons)}
	l.errType = spanread.ErrorType(sp)
	if l.errType == "" && (isFailure(r.FinishReason) || r.Failed) {
		l.errType = r.FinishReason
		if l.errType == "" || !isFailure(l.errType) {
			l.errType = "error"
		}
	}
	l.errType = c.errTypes.label(l.errType, true, maxErrorTypes)
	s := r.Stats()

	b := getSeries(c, st.base, labels{op: l.op, provider: l.provider, model: l.model, adapter: l.adapter, role: l.role}, ts, func(l labels, t pcommon.Timestamp) *baseSeries {
		return &baseSeries{labels: l, start: t}
	})
	for i, d := range [numHists]struct {
		v  time.Duration
		ok bool
	}{
		hTTFT: {s.TTFT, s.Has&reconstruct.HasTTFT != 0}, hTPOT: {s.TPOT, s.Has&reconstruct.HasTPOT != 0},
		hQueue: {s.Queue, s.Has&reconstruct.HasQueue != 0}, hPrefill: {s.Prefill, s.Has&reconstruct.HasPrefill != 0},
		hDecode: {s.Decode, s.Has&reconstruct.HasDecode != 0}, hInference: {s.Inference, s.Has&reconstruct.HasInference != 0},
	} {
		if d.ok {
			b.h[i].record(histInstruments[i].bounds, d.v.Seconds())
		}
	}
	add := func(i int, v int64, ok bool) {
		if ok {
			b.c[i] += v
			b.hasCount[i] = true
		}
	}
	add(cPreemptions, int64(r.Preemptions), r.Preemptions > 0)
	add(cPrompt, int64(r.InputTokens), r.InputTokens >= 0)
	add(cGeneration, int64(r.OutputTokens), r.OutputTokens > 0)
	// A span's cached count above its prompt count (SPEC §1: cached ≤
	// prompt) is dropped by reconstruct.Compute, so it counts no queries
	// nor hits: one such span would put its series' hit rate past 100 %.
	pc := r.CachedTokens >= 0 && r.InputTokens >= 0
	if pc && r.Engine.NoExpand && r.InputTokens > 0 {
		// An llmtrace root's cached tokens are the engine's prefix-cache
		// hits only when it carries llm.prefix_cache.hit_ratio; without
		// it they come from the response's usage (an HTTP frontend, a
		// proxy), maybe another server's cache, which the tracker does
		// not count either (SPEC §4).
		_, pc = sp.Attributes().Get(string(attributes.PrefixCacheHitRatio))
	}
	add(cPCQueries, int64(r.InputTokens), pc)
	add(cPCHits, int64(r.CachedTokens), pc)
	add(cClamped, int64(r.Clamped), r.Clamped > 0)

	d := getSeries(c, st.duration, labels{op: l.op, provider: l.provider, model: l.model, adapter: l.adapter, role: l.role, errType: l.errType}, ts, func(l labels, t pcommon.Timestamp) *durationSeries {
		return &durationSeries{labels: l, start: t}
	})
	d.h.record(durationInstrument.bounds, s.E2E.Seconds())
	q := getSeries(c, st.requests, labels{op: l.op, provider: l.provider, model: l.model, adapter: l.adapter, role: l.role, reason: l.reason}, ts, func(l labels, t pcommon.Timestamp) *requestSeries {
		return &requestSeries{labels: l, start: t}
	})
	q.n++
}

// getSeries finds or creates the series of l in m, folding new series past
// MaxSeries into the overflow series.
func getSeries[S any](c *metricsConnector, m map[string]*S, l labels, ts pcommon.Timestamp, mk func(labels, pcommon.Timestamp) *S) *S {
	c.key = append(c.key[:0], l.op...)
	for _, p := range [...]string{l.provider, l.model, l.adapter, l.role, l.errType, l.reason} {
		c.key = append(c.key, 0)
		c.key = append(c.key, p...)
	}
	if s, ok := m[string(c.key)]; ok {
		return s
	}
	if c.series >= c.cfg.MaxSeries {
		const overflowKey = "\x01overflow"
		if s, ok := m[overflowKey]; ok {
			return s
		}
		s := mk(labels{overflow: true}, ts)
		m[overflowKey] = s
		c.logger.Warn("llmtrace_metrics: max_series reached; new series are folded into otel.metric.overflow=true", zap.Int("max_series", c.cfg.MaxSeries))
		return s
	}
	c.series++
	s := mk(l, ts)
	m[strings.Clone(string(c.key))] = s
	return s
}

// flush emits the cumulative metrics. Building happens under the lock;
// the hand-off to the next consumer does not.
func (c *metricsConnector) flush(ctx context.Context, now time.Time) {
	md := pmetric.NewMetrics()
	ts := pcommon.NewTimestampFromTime(now)
	c.mu.Lock()
	// A batch that took the lock after the tick fired started its new
	// series later than now: no point may end before it started.
	ts = max(ts, c.latest)
	for _, st := range c.resources {
		st.emit(md, ScopeName, reconstruct.Version(), ts)
	}
	c.mu.Unlock()
	if md.DataPointCount() == 0 {
		return
	}
	if err := c.next.ConsumeMetrics(ctx, md); err != nil {
		c.logger.Warn("llmtrace_metrics: the next consumer refused the metrics", zap.Error(err))
	}
}
