package otelstats

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/spans"
)

// base is the epoch of every scenario: times are base + milliseconds.
var base = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func at(ms float64) time.Time { return base.Add(time.Duration(ms * float64(time.Millisecond))) }

type harness struct {
	t      *testing.T
	tr     *Tracker
	rec    *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	mu     sync.Mutex // guards stats against concurrent finishes
	stats  []RequestStats
}

func newHarness(t *testing.T, opts ...Option) *harness {
	t.Helper()
	return newHarnessTP(t, nil, opts...)
}

// newHarnessTP is newHarness with extra TracerProvider options (a sampler).
func newHarnessTP(t *testing.T, tpOpts []sdktrace.TracerProviderOption, opts ...Option) *harness {
	t.Helper()
	h := &harness{t: t, rec: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	tpAll := append([]sdktrace.TracerProviderOption{sdktrace.WithSpanProcessor(h.rec), sdktrace.WithIDGenerator(spans.IDGenerator())}, tpOpts...)
	tp := sdktrace.NewTracerProvider(tpAll...)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(h.reader))
	var direct []Option
	if len(tpOpts) == 0 && os.Getenv("LLMTRACE_TEST_SPAN_PATH") == "processor" {
		// The suite again, with trees handed straight to the processor
		// (WithSpanProcessor) instead of through the Tracer: both paths
		// must give the same spans.
		direct = []Option{WithSpanProcessor(h.rec)}
	}
	all := append([]Option{
		WithTracerProvider(tp), WithMeterProvider(mp), WithTokenLatencies(true),
		WithOnFinish(func(s *RequestStats) {
			h.mu.Lock()
			h.stats = append(h.stats, *s)
			h.mu.Unlock()
		}),
	}, append(direct, opts...)...)
	tr, err := NewTracker(all...)
	if err != nil {
		t.Fatal(err)
	}
	h.tr = tr
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	return h
}

func (h *harness) must(u Update) {
	h.t.Helper()
	if err := h.tr.Record(u); err != nil {
		h.t.Fatalf("Record(%v %s): %v", u.Kind, u.RequestID, err)
	}
}

func (h *harness) statsOf(id string) RequestStats {
	h.t.Helper()
	for _, s := range h.stats {
		if s.RequestID == id {
			return s
		}
	}
	h.t.Fatalf("no stats for %q (have %d)", id, len(h.stats))
	return RequestStats{}
}

func (h *harness) metrics() map[string]metricdata.Aggregation {
	h.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		h.t.Fatal(err)
	}
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

// histCount returns the total count and sum of a histogram over all its
// attribute sets.
func (h *harness) histCount(name string) (uint64, float64) {
	h.t.Helper()
	d, ok := h.metrics()[name]
	if !ok {
		return 0, 0
	}
	var n uint64
	var sum float64
	for _, p := range d.(metricdata.Histogram[float64]).DataPoints {
		n += p.Count
		sum += p.Sum
	}
	return n, sum
}

// counter sums an int counter over attribute sets matching all of match.
func (h *harness) counter(name string, match ...attribute.KeyValue) int64 {
	h.t.Helper()
	d, ok := h.metrics()[name]
	if !ok {
		return 0
	}
	var n int64
	for _, p := range d.(metricdata.Sum[int64]).DataPoints {
		okAll := true
		for _, kv := range match {
			v, has := p.Attributes.Value(kv.Key)
			if !has || v != kv.Value {
				okAll = false
			}
		}
		if okAll {
			n += p.Value
		}
	}
	return n
}

func approx(t *testing.T, what string, got, want float64) {
	t.Helper()
	if d := got - want; d > 1e-9 || d < -1e-9 {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func wantLatency(t *testing.T, what string, got Latency, wantMs float64) {
	t.Helper()
	if wantMs < 0 {
		if got.Valid {
			t.Errorf("%s = %v, want absent", what, got.Value)
		}
		return
	}
	if !got.Valid {
		t.Errorf("%s absent, want %vms", what, wantMs)
		return
	}
	approx(t, what+" (ms)", float64(got.Value)/1e6, wantMs)
}

// ---- helpers added for the issue-2 suite ----

// absent marks a value that must not be present in wantStats.
const absent = -1

// wantStats is a request's expected RequestStats; durations in ms, absent
// (-1) for values whose instants never happened.
type wantStats struct {
	reason, errType                                    string
	arrived, finished                                  float64 // ms since base
	e2e, queue, ttft, prefill, decode, inference, tpot float64
	preempted                                          float64
	itl                                                []float64 // ms, one per delivery
	prompt, cached                                     int       // absent (-1) when unknown
	out, preemptions, recomputeCached                  int
}

func checkStats(t *testing.T, s RequestStats, w wantStats) {
	t.Helper()
	if s.FinishReason != w.reason {
		t.Errorf("finish_reason = %q, want %q", s.FinishReason, w.reason)
	}
	if s.ErrorType != w.errType {
		t.Errorf("error_type = %q, want %q", s.ErrorType, w.errType)
	}
	approx(t, "arrival_time (ms)", msSince(s.ArrivalTime), w.arrived)
	approx(t, "finished_time (ms)", msSince(s.FinishedTime), w.finished)
	wantLatency(t, "e2e", s.E2ELatency, w.e2e)
	wantLatency(t, "queue", s.QueueDuration, w.queue)
	wantLatency(t, "ttft", s.FirstTokenLatency, w.ttft)
	wantLatency(t, "prefill", s.PrefillLatency, w.prefill)
	wantLatency(t, "decode", s.DecodeLatency, w.decode)
	wantLatency(t, "inference", s.InferenceLatency, w.inference)
	wantLatency(t, "tpot", s.TimePerOutputToken, w.tpot)
	approx(t, "preempted (ms)", ms(s.PreemptedDuration), w.preempted)
	if w.itl != nil || s.OutputTokenLatencies != nil {
		if len(s.OutputTokenLatencies) != len(w.itl) {
			t.Errorf("itl = %v, want %v ms", s.OutputTokenLatencies, w.itl)
		} else {
			for i := range w.itl {
				approx(t, fmt.Sprintf("itl[%d] (ms)", i), ms(s.OutputTokenLatencies[i]), w.itl[i])
			}
		}
	}
	wantCount(t, "num_prompt_tokens", s.NumPromptTokens, w.prompt)
	wantCount(t, "num_cached_tokens", s.NumCachedTokens, w.cached)
	if s.NumOutputTokens != w.out {
		t.Errorf("num_output_tokens = %d, want %d", s.NumOutputTokens, w.out)
	}
	if s.NumPreemptions != w.preemptions {
		t.Errorf("num_preemptions = %d, want %d", s.NumPreemptions, w.preemptions)
	}
	if s.NumRecomputeCachedTokens != w.recomputeCached {
		t.Errorf("num_recompute_cached_tokens = %d, want %d", s.NumRecomputeCachedTokens, w.recomputeCached)
	}
}

func wantCount(t *testing.T, what string, got Count, want int) {
	t.Helper()
	switch {
	case want < 0 && got.Valid:
		t.Errorf("%s = %d, want absent", what, got.N)
	case want >= 0 && !got.Valid:
		t.Errorf("%s absent, want %d", what, want)
	case want >= 0 && got.N != want:
		t.Errorf("%s = %d, want %d", what, got.N, want)
	}
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func msSince(tm time.Time) float64 { return ms(tm.Sub(base)) }

// sameStats compares two RequestStats ignoring the random trace and span ids.
func sameStats(t *testing.T, got, want RequestStats) {
	t.Helper()
	got.TraceID, got.SpanID, want.TraceID, want.SpanID = "", "", "", ""
	if !reflect.DeepEqual(got, want) {
		t.Errorf("stats differ:\n got %s\nwant %s", got.AppendJSON(nil), want.AppendJSON(nil))
	}
}

// statsOfModel is statsOf for requests that share an id.
func (h *harness) statsOfModel(id, model string) RequestStats {
	h.t.Helper()
	for _, s := range h.stats {
		if s.RequestID == id && s.Model == model {
			return s
		}
	}
	h.t.Fatalf("no stats for %q/%q (have %d)", id, model, len(h.stats))
	return RequestStats{}
}

// treeOf returns the root span of s's trace and its other spans in the
// order they ended (the order the tree emits them). It fails the test if a
// span of the trace is not a direct child of the root.
func (h *harness) treeOf(s RequestStats) (sdktrace.ReadOnlySpan, []sdktrace.ReadOnlySpan) {
	h.t.Helper()
	var root sdktrace.ReadOnlySpan
	var rest []sdktrace.ReadOnlySpan
	for _, sp := range h.rec.Ended() {
		if sp.SpanContext().TraceID().String() != s.TraceID {
			continue
		}
		if sp.SpanContext().SpanID().String() == s.SpanID {
			root = sp
			continue
		}
		rest = append(rest, sp)
	}
	if root == nil {
		h.t.Fatalf("no root span %s in trace %s", s.SpanID, s.TraceID)
	}
	for _, c := range rest {
		if c.Parent().SpanID() != root.SpanContext().SpanID() || c.Parent().TraceID() != root.SpanContext().TraceID() {
			h.t.Errorf("span %s: parent %s, want the root %s", c.Name(), c.Parent().SpanID(), root.SpanContext().SpanID())
		}
	}
	return root, rest
}

type wantRoot struct {
	name       string
	start, end float64 // ms
	attrs      []attribute.KeyValue
	noAttrs    []attribute.Key
	status     codes.Code
	statusDesc string
}

type wantSpan struct {
	name       string
	start, end float64 // ms
	attrs      []attribute.KeyValue
	events     []wantEvent
}

type wantEvent struct {
	name  string
	at    float64 // ms
	attrs []attribute.KeyValue
}

// checkTree checks a request's whole span tree: the root (SERVER) and its
// children (INTERNAL, in emit order), with explicit times and key attributes.
func (h *harness) checkTree(s RequestStats, wr wantRoot, wc []wantSpan) {
	h.t.Helper()
	t := h.t
	root, kids := h.treeOf(s)
	if root.Name() != wr.name {
		t.Errorf("root name = %q, want %q", root.Name(), wr.name)
	}
	if root.SpanKind() != trace.SpanKindServer {
		t.Errorf("root kind = %v, want server", root.SpanKind())
	}
	approx(t, "root start (ms)", msSince(root.StartTime()), wr.start)
	approx(t, "root end (ms)", msSince(root.EndTime()), wr.end)
	checkAttrs(t, "root", root.Attributes(), wr.attrs)
	for _, k := range wr.noAttrs {
		if v, ok := attrOf(root.Attributes(), k); ok {
			t.Errorf("root has %s = %v, want absent", k, v.String())
		}
	}
	if root.Status().Code != wr.status || root.Status().Description != wr.statusDesc {
		t.Errorf("root status = %v %q, want %v %q", root.Status().Code, root.Status().Description, wr.status, wr.statusDesc)
	}
	if len(kids) != len(wc) {
		var names []string
		for _, k := range kids {
			names = append(names, fmt.Sprintf("%s[%v,%v]", k.Name(), msSince(k.StartTime()), msSince(k.EndTime())))
		}
		t.Fatalf("children = %v, want %d", names, len(wc))
	}
	for i, w := range wc {
		k := kids[i]
		what := fmt.Sprintf("child %d (%s)", i, w.name)
		if k.Name() != w.name {
			t.Errorf("%s: name = %q", what, k.Name())
		}
		if k.SpanKind() != trace.SpanKindInternal {
			t.Errorf("%s: kind = %v, want internal", what, k.SpanKind())
		}
		approx(t, what+" start (ms)", msSince(k.StartTime()), w.start)
		approx(t, what+" end (ms)", msSince(k.EndTime()), w.end)
		checkAttrs(t, what, k.Attributes(), w.attrs)
		evs := k.Events()
		if len(evs) != len(w.events) {
			t.Errorf("%s: %d events, want %d", what, len(evs), len(w.events))
			continue
		}
		for j, we := range w.events {
			if evs[j].Name != we.name {
				t.Errorf("%s event %d: name %q, want %q", what, j, evs[j].Name, we.name)
			}
			approx(t, fmt.Sprintf("%s event %d time (ms)", what, j), msSince(evs[j].Time), we.at)
			checkAttrs(t, fmt.Sprintf("%s event %d", what, j), evs[j].Attributes, we.attrs)
		}
	}
	checkInside(t, root, kids)
}

// checkInside checks SPEC §3's structural rules for any tree.
func checkInside(t testing.TB, root sdktrace.ReadOnlySpan, kids []sdktrace.ReadOnlySpan) {
	t.Helper()
	if root.EndTime().Before(root.StartTime()) {
		t.Errorf("root %s ends before it starts", root.Name())
	}
	if root.StartTime().IsZero() || root.EndTime().IsZero() {
		t.Errorf("root %s has a zero timestamp", root.Name())
	}
	for _, k := range kids {
		if k.EndTime().Before(k.StartTime()) {
			t.Errorf("%s: negative duration %v", k.Name(), k.EndTime().Sub(k.StartTime()))
		}
		if k.StartTime().Before(root.StartTime()) || k.EndTime().After(root.EndTime()) {
			t.Errorf("%s [%v, %v] outside the root [%v, %v]", k.Name(), k.StartTime(), k.EndTime(), root.StartTime(), root.EndTime())
		}
	}
}

func attrOf(kvs []attribute.KeyValue, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range kvs {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func checkAttrs(t testing.TB, what string, got, want []attribute.KeyValue) {
	t.Helper()
	for _, w := range want {
		v, ok := attrOf(got, w.Key)
		switch {
		case !ok:
			t.Errorf("%s: attribute %s missing, want %s", what, w.Key, w.Value.String())
		case w.Value.Type() == attribute.FLOAT64 && v.Type() == attribute.FLOAT64:
			if d := v.AsFloat64() - w.Value.AsFloat64(); d > 1e-12 || d < -1e-12 {
				t.Errorf("%s: %s = %v, want %v", what, w.Key, v.AsFloat64(), w.Value.AsFloat64())
			}
		case v != w.Value:
			t.Errorf("%s: %s = %s (%s), want %s (%s)", what, w.Key, v.String(), v.Type(), w.Value.String(), w.Value.Type())
		}
	}
}

// hist returns the count and sum of a histogram over the data points whose
// attributes include all of match.
func (h *harness) hist(name string, match ...attribute.KeyValue) (uint64, float64) {
	h.t.Helper()
	d, ok := h.metrics()[name]
	if !ok {
		return 0, 0
	}
	var n uint64
	var sum float64
	for _, p := range d.(metricdata.Histogram[float64]).DataPoints {
		if hasAll(p.Attributes, match) {
			n += p.Count
			sum += p.Sum
		}
	}
	return n, sum
}

func hasAll(set attribute.Set, match []attribute.KeyValue) bool {
	for _, kv := range match {
		v, has := set.Value(kv.Key)
		if !has || v != kv.Value {
			return false
		}
	}
	return true
}

// wantHist checks a histogram's count and sum (sum in ms).
func (h *harness) wantHist(name string, count uint64, sumMs float64, match ...attribute.KeyValue) {
	h.t.Helper()
	n, sum := h.hist(name, match...)
	if n != count {
		h.t.Errorf("%s%v count = %d, want %d", name, match, n, count)
	}
	approx(h.t, name+" sum (ms)", sum*1e3, sumMs)
}

// wantCounter checks an int counter summed over data points matching match.
func (h *harness) wantCounter(name string, want int64, match ...attribute.KeyValue) {
	h.t.Helper()
	if got := h.counter(name, match...); got != want {
		h.t.Errorf("%s%v = %d, want %d", name, match, got, want)
	}
}

// rejects is llm.rejected_updates for one reason, or for all with "".
func (h *harness) rejects(r Reason) int64 {
	h.t.Helper()
	if r == "" {
		return h.counter(attributes.MetricRejectedUpdates)
	}
	return h.counter(attributes.MetricRejectedUpdates, attributes.RejectionReason.String(string(r)))
}

// gaugeInt and gaugeFloat return the last value of a gauge.
func (h *harness) gaugeInt(name string) (int64, bool) { return gaugeOf[int64](h, name) }

func (h *harness) gaugeFloat(name string) (float64, bool) { return gaugeOf[float64](h, name) }

func gaugeOf[N int64 | float64](h *harness, name string) (N, bool) {
	h.t.Helper()
	d, ok := h.metrics()[name]
	if !ok {
		return 0, false
	}
	ps := d.(metricdata.Gauge[N]).DataPoints
	if len(ps) == 0 {
		return 0, false
	}
	return ps[0].Value, true
}

// feed records every update and fails on the first rejection.
func (h *harness) feed(us []Update) {
	h.t.Helper()
	for _, u := range us {
		h.must(u)
	}
}

// attrSetsOf returns the attribute sets of a metric's data points.
func attrSetsOf(d metricdata.Aggregation) []attribute.Set {
	var out []attribute.Set
	switch d := d.(type) {
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	case metricdata.Gauge[float64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	}
	return out
}
