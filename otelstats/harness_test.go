package otelstats

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

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
	stats  []RequestStats
}

func newHarness(t *testing.T, opts ...Option) *harness {
	t.Helper()
	h := &harness{t: t, rec: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(h.rec), sdktrace.WithIDGenerator(spans.IDGenerator()))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(h.reader))
	all := append([]Option{
		WithTracerProvider(tp), WithMeterProvider(mp), WithTokenLatencies(true),
		WithOnFinish(func(s *RequestStats) { h.stats = append(h.stats, *s) }),
	}, opts...)
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
