package otelstats

import (
	"context"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/attributes"
)

// Aggregator aggregates llmtrace's eight latency histograms and its
// per-request counters itself and hands them to metric readers as an
// sdkmetric.Producer. It is the fast path: one
// lock per finished request and a merge of the request's per-bucket ITL
// counts, instead of one Histogram.Record per inter-token gap (tens of
// nanoseconds each, hundreds per request). The data is the same — names,
// units, boundaries, attributes, cumulative temporality, exemplars of kept
// traces — and ITL min/max are exact here.
//
// Wire it into every reader that should see the histograms, then give it to
// the tracker:
//
//	agg := otelstats.NewAggregator()
//	reader := sdkmetric.NewPeriodicReader(exp, sdkmetric.WithProducer(agg))
//	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
//	tracker, _ := otelstats.NewTracker(otelstats.WithMeterProvider(mp), otelstats.WithAggregator(agg))
//
// With an Aggregator the tracker does not create those eight histogram
// instruments, nor the six counters it adds to once per finished request
// (requests, preemptions, prompt and generation tokens, prefix-cache queries
// and hits), on the MeterProvider, so nothing is exported twice; the
// Aggregator serves them as monotonic cumulative sums. The gauges and the
// rare counters (rejections, drops, clamps, evictions) still go through the
// MeterProvider. The zero Aggregator is not
// usable; it is safe for concurrent use. Its points are cumulative
// whatever temporality a reader asks for (a Producer's data passes through
// the reader unchanged), so a delta reader exports these metrics as
// cumulative. As the SDK's instruments by default, it keeps at most 2,000
// series per metric: past that, new attribute sets are added to one series
// with otel.metric.overflow=true (a MeterProvider configured with another
// sdkmetric.WithCardinalityLimit then differs from it).
type Aggregator struct {
	start time.Time
	mu    sync.Mutex
	// series[h] maps an attribute set to its point.
	series [numHists]map[attribute.Distinct]*aggPoint
	sums   [numSums]map[attribute.Distinct]*sumPoint
}

// The counters the Aggregator keeps.
const (
	sRequests = iota
	sPreemptions
	sPromptTok
	sGenTok
	sPCQueries
	sPCHits
	numSums
)

var sumDefs = [numSums]struct{ name, unit, desc string }{
	{attributes.MetricRequests, attributes.UnitRequest, "Finished requests by finish reason."},
	{attributes.MetricPreemptions, attributes.UnitPreempt, "Preemptions of running requests."},
	{attributes.MetricPromptTokens, attributes.UnitToken, "Prompt tokens of finished requests."},
	{attributes.MetricGenerationTokens, attributes.UnitToken, "Generated tokens of finished requests."},
	{attributes.MetricPrefixCacheQuery, attributes.UnitToken, "Prompt tokens looked up in the prefix cache."},
	{attributes.MetricPrefixCacheHits, attributes.UnitToken, "Prompt tokens served from the prefix cache."},
}

type sumPoint struct {
	attrs attribute.Set
	v     int64
}

// counts are a finished request's additions to the counters. A counter
// not in has is left alone; one in has is added to even by zero, so that
// its series exists (a prefix-cache hit count of 0 is a value, not an
// absence).
type counts struct {
	v   [numSums]int64
	has [numSums]bool
}

func (c *counts) set(i int, n int64) { c.v[i], c.has[i] = n, true }

func (a *Aggregator) addSum(i int, set attribute.Set, n int64) {
	seriesOf(a.sums[i], set, newSumPoint).v += n
}

func newSumPoint(set attribute.Set) *sumPoint { return &sumPoint{attrs: set} }

// seriesOf is m's series for set, made by mk when it is new; past
// aggSeriesLimit-1 sets, a new set's series is the overflow series.
func seriesOf[P any](m map[attribute.Distinct]*P, set attribute.Set, mk func(attribute.Set) *P) *P {
	if p, ok := m[set.Equivalent()]; ok {
		return p
	}
	if len(m) >= aggSeriesLimit-1 {
		set = overflowSet
		if p, ok := m[set.Equivalent()]; ok {
			return p
		}
	}
	p := mk(set)
	m[set.Equivalent()] = p
	return p
}

// aggSeriesLimit is the most series the Aggregator keeps per metric, as
// the SDK's instruments do by default (sdkmetric.WithCardinalityLimit,
// 2000): past aggSeriesLimit-1 attribute sets, every new one folds into
// one series with overflowSet, so the two paths export the same points and
// the Aggregator's memory stays bounded whatever a producer sends.
const aggSeriesLimit = 2000

// overflowSet is the SDK's overflow series' attribute set.
var overflowSet = attribute.NewSet(attribute.Bool("otel.metric.overflow", true))

// addCounts adds counters outside a request (the engine's own prefix-cache
// counts).
func (a *Aggregator) addCounts(c *counts, set attribute.Set) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, n := range c.v {
		if c.has[i] {
			a.addSum(i, set, n)
		}
	}
}

var _ sdkmetric.Producer = (*Aggregator)(nil)

const (
	hTTFT = iota
	hTPOT
	hE2E
	hITL
	hQueue
	hPrefill
	hDecode
	hInference
	numHists
)

var histDefs = [numHists]struct {
	name, desc string
	bounds     []float64
}{
	{attributes.MetricTimeToFirstToken, "Time to first token.", attributes.TimeToFirstTokenBuckets()},
	{attributes.MetricTimePerOutputToken, "Time per output token after the first.", attributes.TimePerOutputTokenBuckets()},
	{attributes.MetricRequestDuration, "End-to-end request duration.", attributes.RequestDurationBuckets()},
	{attributes.MetricInterTokenLatency, "Gap between successive token deliveries.", attributes.InterTokenLatencyBuckets()},
	{attributes.MetricQueueDuration, "Time in the waiting queue before the first scheduling.", attributes.PhaseDurationBuckets()},
	{attributes.MetricPrefillDuration, "First scheduling to first token.", attributes.PhaseDurationBuckets()},
	{attributes.MetricDecodeDuration, "First token to finish.", attributes.PhaseDurationBuckets()},
	{attributes.MetricInferenceDuration, "First scheduling to finish.", attributes.PhaseDurationBuckets()},
}

type aggPoint struct {
	attrs     attribute.Set
	counts    []uint64
	sum       float64
	count     uint64
	min, max  float64
	exemplars []metricdata.Exemplar[float64] // one per bucket, the latest kept trace
}

// NewAggregator returns an empty Aggregator.
func NewAggregator() *Aggregator {
	a := &Aggregator{start: time.Now()}
	for i := range a.series {
		a.series[i] = make(map[attribute.Distinct]*aggPoint)
	}
	for i := range a.sums {
		a.sums[i] = make(map[attribute.Distinct]*sumPoint)
	}
	return a
}

func (a *Aggregator) point(h int, set attribute.Set) *aggPoint {
	return seriesOf(a.series[h], set, func(set attribute.Set) *aggPoint {
		return &aggPoint{attrs: set, counts: make([]uint64, len(histDefs[h].bounds)+1), min: math.Inf(1), max: math.Inf(-1)}
	})
}

func bucketOf(bounds []float64, v float64) int {
	return sort.SearchFloat64s(bounds, v) // bounds[i-1] < v <= bounds[i]
}

func (p *aggPoint) add(h int, v float64, sc trace.SpanContext, now time.Time) {
	i := bucketOf(histDefs[h].bounds, v)
	p.counts[i]++
	p.sum += v
	p.count++
	p.min, p.max = min(p.min, v), max(p.max, v)
	if sc.IsSampled() {
		if p.exemplars == nil {
			p.exemplars = make([]metricdata.Exemplar[float64], len(p.counts))
		}
		e := &p.exemplars[i]
		e.Value, e.Time = v, now
		tid, sid := sc.TraceID(), sc.SpanID()
		e.TraceID, e.SpanID = append(e.TraceID[:0], tid[:]...), append(e.SpanID[:0], sid[:]...)
	}
}

// record adds one finished request: its latencies, its ITL buckets, and
// its counts (requests under finished, the rest under base).
func (a *Aggregator) record(sc trace.SpanContext, s *RequestStats, itl *itlHist, base, duration, finished attribute.Set, c *counts) {
	now := time.Now()
	vals := [numHists]Latency{
		hTTFT: s.FirstTokenLatency, hTPOT: s.TimePerOutputToken, hE2E: s.E2ELatency,
		hQueue: s.QueueDuration, hPrefill: s.PrefillLatency, hDecode: s.DecodeLatency, hInference: s.InferenceLatency,
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, n := range c.v {
		if !c.has[i] {
			continue
		}
		set := base
		if i == sRequests {
			set = finished
		}
		a.addSum(i, set, n)
	}
	for h, l := range vals {
		if !l.Valid {
			continue
		}
		set := base
		if h == hE2E {
			set = duration
		}
		a.point(h, set).add(h, l.Value.Seconds(), sc, now)
	}
	if itl.empty() {
		return
	}
	p := a.point(hITL, base)
	for i, c := range itl.n {
		if c == 0 {
			continue
		}
		// itlHist uses the same boundaries, in nanoseconds.
		p.counts[i] += uint64(c)
		p.count += uint64(c)
		p.sum += float64(itl.sum[i]) / 1e9
	}
	p.min = min(p.min, float64(itl.smallest())/1e9)
	p.max = max(p.max, float64(itl.max)/1e9)
}

// Produce returns the histograms aggregated so far (cumulative).
func (a *Aggregator) Produce(context.Context) ([]metricdata.ScopeMetrics, error) {
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	sm := metricdata.ScopeMetrics{Scope: instrumentation.Scope{Name: ScopeName, Version: Version()}}
	for h := range a.series {
		if len(a.series[h]) == 0 {
			continue
		}
		d := metricdata.Histogram[float64]{Temporality: metricdata.CumulativeTemporality}
		for _, p := range a.series[h] {
			dp := metricdata.HistogramDataPoint[float64]{
				Attributes:   p.attrs,
				StartTime:    a.start,
				Time:         now,
				Count:        p.count,
				Bounds:       histDefs[h].bounds,
				BucketCounts: append([]uint64(nil), p.counts...),
				Sum:          p.sum,
				Min:          metricdata.NewExtrema(p.min),
				Max:          metricdata.NewExtrema(p.max),
			}
			for _, e := range p.exemplars {
				if e.TraceID != nil {
					// Copies: add reuses the ids' memory while a reader
					// may still hold what it was given.
					e.TraceID, e.SpanID = slices.Clone(e.TraceID), slices.Clone(e.SpanID)
					dp.Exemplars = append(dp.Exemplars, e)
				}
			}
			d.DataPoints = append(d.DataPoints, dp)
		}
		sm.Metrics = append(sm.Metrics, metricdata.Metrics{
			Name: histDefs[h].name, Description: histDefs[h].desc, Unit: attributes.UnitSeconds, Data: d,
		})
	}
	for i := range a.sums {
		if len(a.sums[i]) == 0 {
			continue
		}
		d := metricdata.Sum[int64]{Temporality: metricdata.CumulativeTemporality, IsMonotonic: true}
		for _, p := range a.sums[i] {
			d.DataPoints = append(d.DataPoints, metricdata.DataPoint[int64]{Attributes: p.attrs, StartTime: a.start, Time: now, Value: p.v})
		}
		sm.Metrics = append(sm.Metrics, metricdata.Metrics{Name: sumDefs[i].name, Description: sumDefs[i].desc, Unit: sumDefs[i].unit, Data: d})
	}
	if len(sm.Metrics) == 0 {
		return nil, nil
	}
	return []metricdata.ScopeMetrics{sm}, nil
}
