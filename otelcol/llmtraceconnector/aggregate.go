package llmtraceconnector

import (
	"math"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/llmtrace/llmtrace/attributes"
)

// hist is one cumulative explicit-bucket histogram.
type hist struct {
	counts     []uint64 // len(bounds)+1
	sum        float64
	n          uint64
	minV, maxV float64
}

func (h *hist) record(bounds []float64, v float64) {
	if h.counts == nil {
		h.counts = make([]uint64, len(bounds)+1)
		h.minV, h.maxV = math.Inf(1), math.Inf(-1)
	}
	i := 0
	for i < len(bounds) && v > bounds[i] { // buckets are (lo, hi], as the SDK's
		i++
	}
	h.counts[i]++
	h.sum += v
	h.n++
	h.minV, h.maxV = min(h.minV, v), max(h.maxV, v)
}

// The histograms and counters keyed by operation and model.
const (
	hTTFT = iota
	hTPOT
	hQueue
	hPrefill
	hDecode
	hInference
	numHists
)

const (
	cPreemptions = iota
	cPrompt
	cGeneration
	cPCQueries
	cPCHits
	cClamped
	numCounters
)

type instrument struct {
	name, unit, desc string
	bounds           []float64
}

// Bucket boundaries come from package attributes, so a change there flows
// into the collector's metrics as into the library's.
var (
	histInstruments = [numHists]instrument{
		hTTFT:      {attributes.MetricTimeToFirstToken, attributes.UnitSeconds, "Time to first token.", attributes.TimeToFirstTokenBuckets()},
		hTPOT:      {attributes.MetricTimePerOutputToken, attributes.UnitSeconds, "Time per output token after the first.", attributes.TimePerOutputTokenBuckets()},
		hQueue:     {attributes.MetricQueueDuration, attributes.UnitSeconds, "Time in the waiting queue before the first scheduling.", attributes.PhaseDurationBuckets()},
		hPrefill:   {attributes.MetricPrefillDuration, attributes.UnitSeconds, "First scheduling to first token.", attributes.PhaseDurationBuckets()},
		hDecode:    {attributes.MetricDecodeDuration, attributes.UnitSeconds, "First token to finish.", attributes.PhaseDurationBuckets()},
		hInference: {attributes.MetricInferenceDuration, attributes.UnitSeconds, "First scheduling to finish.", attributes.PhaseDurationBuckets()},
	}
	durationInstrument = instrument{attributes.MetricRequestDuration, attributes.UnitSeconds, "End-to-end request duration.", attributes.RequestDurationBuckets()}
	counterInstruments = [numCounters]instrument{
		cPreemptions: {name: attributes.MetricPreemptions, unit: attributes.UnitPreempt, desc: "Preemptions of running requests."},
		cPrompt:      {name: attributes.MetricPromptTokens, unit: attributes.UnitToken, desc: "Prompt tokens of finished requests."},
		cGeneration:  {name: attributes.MetricGenerationTokens, unit: attributes.UnitToken, desc: "Generated tokens of finished requests."},
		cPCQueries:   {name: attributes.MetricPrefixCacheQuery, unit: attributes.UnitToken, desc: "Prompt tokens looked up in the prefix cache."},
		cPCHits:      {name: attributes.MetricPrefixCacheHits, unit: attributes.UnitToken, desc: "Prompt tokens served from the prefix cache."},
		cClamped:     {name: attributes.MetricReconstructClamped, unit: attributes.UnitValue, desc: "Latency values of engine request spans clamped or dropped because they contradicted each other."},
	}
	requestsInstrument = instrument{name: attributes.MetricRequests, unit: attributes.UnitRequest, desc: "Finished requests by finish reason."}
)

// labels are a series' metric attributes; empty values are left out.
type labels struct {
	op, provider, model, adapter, role, errType, reason string
	overflow                                            bool
}

func (l *labels) putTo(m pcommon.Map) {
	if l.overflow {
		m.PutBool("otel.metric.overflow", true)
		return
	}
	for _, kv := range [...]struct{ k, v string }{
		{string(attributes.OperationName), l.op}, {string(attributes.ProviderName), l.provider},
		{string(attributes.RequestModel), l.model},
		{string(attributes.LoRAAdapter), l.adapter}, {string(attributes.PDRole), l.role},
		{string(attributes.ErrorType), l.errType}, {string(attributes.FinishReason), l.reason},
	} {
		if kv.v != "" {
			m.PutStr(kv.k, kv.v)
		}
	}
}

// baseSeries holds the instruments keyed by operation and model.
type baseSeries struct {
	labels
	start    pcommon.Timestamp
	h        [numHists]hist
	c        [numCounters]int64
	hasCount [numCounters]bool
}

type durationSeries struct {
	labels
	start pcommon.Timestamp
	h     hist
}

type requestSeries struct {
	labels
	start pcommon.Timestamp
	n     int64
}

// resourceState is one resource's series.
type resourceState struct {
	attrs    pcommon.Map
	base     map[string]*baseSeries
	duration map[string]*durationSeries
	requests map[string]*requestSeries
}

// emit appends the resource's cumulative metrics to md.
func (rs *resourceState) emit(md pmetric.Metrics, scope, version string, now pcommon.Timestamp) {
	rm := md.ResourceMetrics().AppendEmpty()
	rs.attrs.CopyTo(rm.Resource().Attributes())
	sm := rm.ScopeMetrics().AppendEmpty()
	sm.Scope().SetName(scope)
	sm.Scope().SetVersion(version)
	ms := sm.Metrics()
	for i := range histInstruments {
		var m pmetric.HistogramDataPointSlice
		for _, s := range rs.base {
			if s.h[i].n == 0 {
				continue
			}
			if m == (pmetric.HistogramDataPointSlice{}) {
				m = newHistogram(ms, &histInstruments[i])
			}
			putHist(m.AppendEmpty(), &s.h[i], histInstruments[i].bounds, &s.labels, s.start, now)
		}
	}
	var dm pmetric.HistogramDataPointSlice
	for _, s := range rs.duration {
		if dm == (pmetric.HistogramDataPointSlice{}) {
			dm = newHistogram(ms, &durationInstrument)
		}
		putHist(dm.AppendEmpty(), &s.h, durationInstrument.bounds, &s.labels, s.start, now)
	}
	for i := range counterInstruments {
		var m pmetric.NumberDataPointSlice
		for _, s := range rs.base {
			if !s.hasCount[i] {
				continue
			}
			if m == (pmetric.NumberDataPointSlice{}) {
				m = newSum(ms, &counterInstruments[i])
			}
			putSum(m.AppendEmpty(), s.c[i], &s.labels, s.start, now)
		}
	}
	var rqm pmetric.NumberDataPointSlice
	for _, s := range rs.requests {
		if rqm == (pmetric.NumberDataPointSlice{}) {
			rqm = newSum(ms, &requestsInstrument)
		}
		putSum(rqm.AppendEmpty(), s.n, &s.labels, s.start, now)
	}
}

func newHistogram(ms pmetric.MetricSlice, in *instrument) pmetric.HistogramDataPointSlice {
	m := ms.AppendEmpty()
	m.SetName(in.name)
	m.SetUnit(in.unit)
	m.SetDescription(in.desc)
	h := m.SetEmptyHistogram()
	h.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	return h.DataPoints()
}

func newSum(ms pmetric.MetricSlice, in *instrument) pmetric.NumberDataPointSlice {
	m := ms.AppendEmpty()
	m.SetName(in.name)
	m.SetUnit(in.unit)
	m.SetDescription(in.desc)
	s := m.SetEmptySum()
	s.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	s.SetIsMonotonic(true)
	return s.DataPoints()
}

func putHist(dp pmetric.HistogramDataPoint, h *hist, bounds []float64, l *labels, start, now pcommon.Timestamp) {
	l.putTo(dp.Attributes())
	dp.SetStartTimestamp(start)
	dp.SetTimestamp(now)
	dp.ExplicitBounds().FromRaw(bounds)
	dp.BucketCounts().FromRaw(h.counts)
	dp.SetCount(h.n)
	dp.SetSum(h.sum)
	dp.SetMin(h.minV)
	dp.SetMax(h.maxV)
}

func putSum(dp pmetric.NumberDataPoint, v int64, l *labels, start, now pcommon.Timestamp) {
	l.putTo(dp.Attributes())
	dp.SetStartTimestamp(start)
	dp.SetTimestamp(now)
	dp.SetIntValue(v)
}
