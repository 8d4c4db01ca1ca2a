package otelstats

import (
	"context"
	"fmt"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/llmtrace/llmtrace/attributes"
)

// bothPaths runs script on a tracker recording through the MeterProvider's
// instruments (agg=false) and on one with an Aggregator (agg=true), and
// returns what a ManualReader collects from each.
func bothPaths(t *testing.T, script func(tr *Tracker), opts ...Option) [2]metricdata.ResourceMetrics {
	t.Helper()
	var out [2]metricdata.ResourceMetrics
	for i, useAgg := range []bool{false, true} {
		reader := sdkmetric.NewManualReader()
		all := append([]Option(nil), opts...)
		if useAgg {
			agg := NewAggregator()
			reader = sdkmetric.NewManualReader(sdkmetric.WithProducer(agg))
			all = append(all, WithAggregator(agg))
		}
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		tr, err := NewTracker(append(all, WithMeterProvider(mp))...)
		if err != nil {
			t.Fatal(err)
		}
		script(tr)
		_ = tr.Shutdown(context.Background())
		if err := reader.Collect(context.Background(), &out[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func metricOf(rm metricdata.ResourceMetrics, name string) (metricdata.Aggregation, bool) {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m.Data, true
			}
		}
	}
	return nil, false
}

// The inter-token latency's min and max are the smallest and the largest
// gap on both paths: the instrument path recorded every bucket's gaps at
// their mean, so its min and max were means no gap had (a 2 ms and an
// 8 ms gap exported min = max = 5 ms), and the two paths disagreed.
func TestITLMinMaxExactOnBothPaths(t *testing.T) {
	gapsMs := []float64{2, 8, 30, 40, 80, 95} // two gaps in each of three buckets
	rms := bothPaths(t, func(tr *Tracker) {
		rec := func(u Update) {
			u.RequestID = "r"
			if err := tr.Record(u); err != nil {
				t.Fatal(err)
			}
		}
		rec(Update{Kind: KindArrived, Time: at(0), Model: "m"})
		rec(Update{Kind: KindQueued, Time: at(1)})
		rec(Update{Kind: KindPrefilling, Time: at(2), NumComputedTokens: 8})
		now := 10.0
		rec(Update{Kind: KindDecoding, Time: at(now)})
		for _, g := range gapsMs {
			now += g
			rec(Update{Kind: KindDecoding, Time: at(now)})
		}
		rec(Update{Kind: KindFinished, Side: SideEngine, Time: at(now), FinishReason: "stop"})
		tr.Flush()
	})
	for i, path := range []string{"instruments", "aggregator"} {
		d, ok := metricOf(rms[i], attributes.MetricInterTokenLatency)
		if !ok {
			t.Fatalf("%s: no ITL histogram", path)
		}
		pts := d.(metricdata.Histogram[float64]).DataPoints
		if len(pts) != 1 {
			t.Fatalf("%s: %d ITL series", path, len(pts))
		}
		p := pts[0]
		mn, okMin := p.Min.Value()
		mx, okMax := p.Max.Value()
		if !okMin || !okMax || mn != 0.002 || mx != 0.095 {
			t.Errorf("%s: ITL min %v (%v) max %v (%v), want 0.002 and 0.095", path, mn, okMin, mx, okMax)
		}
		if p.Count != 6 || fmt.Sprint(p.BucketCounts[:6]) != "[2 0 2 0 2 0]" {
			t.Errorf("%s: ITL count %d buckets %v", path, p.Count, p.BucketCounts)
		}
		if d := p.Sum - 0.255; d > 1e-12 || d < -1e-12 {
			t.Errorf("%s: ITL sum %v, want 0.255", path, p.Sum)
		}
	}
}

// Past the SDK's cardinality limit (2,000 series per instrument, the last
// one otel.metric.overflow=true) the Aggregator folds new attribute sets
// into the overflow series as the MeterProvider's instruments do. It kept
// a series per set without bound: a producer combining the operations,
// models and adapters each guard admits (23 × 65 × 65 sets, times 28
// finish reasons for llm.server.requests) grew it by millions of points,
// and the two paths exported different series.
func TestAggregatorCardinalityLimitLikeSDK(t *testing.T) {
	const models, adapters = 64, 2
	ops := append(append([]string(nil), seedOperations...), make([]string, maxExtraOperations)...)
	for i := range maxExtraOperations {
		ops[len(seedOperations)+i] = fmt.Sprint("op-", i)
	}
	n := 0
	rms := bothPaths(t, func(tr *Tracker) {
		n = 0
		for _, op := range ops {
			for m := range models {
				for a := range adapters {
					id := fmt.Sprint("r", n)
					t0 := float64(n)
					n++
					if err := tr.Record(Update{RequestID: id, Kind: KindArrived, Time: at(t0), Model: fmt.Sprint("m", m),
						Operation: op, LoRAAdapter: fmt.Sprint("a", a)}); err != nil {
						t.Fatal(err)
					}
					if err := tr.Record(Update{RequestID: id, Kind: KindFinished, Time: at(t0 + 0.5), FinishReason: "stop"}); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	})
	for _, name := range []string{attributes.MetricRequestDuration, attributes.MetricRequests} {
		var series [2]map[string]uint64
		for i, path := range []string{"instruments", "aggregator"} {
			d, ok := metricOf(rms[i], name)
			if !ok {
				t.Fatalf("%s: no %s", path, name)
			}
			series[i] = map[string]uint64{}
			var total uint64
			switch d := d.(type) {
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					series[i][p.Attributes.Encoded(attribute.DefaultEncoder())] = p.Count
					total += p.Count
				}
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					series[i][p.Attributes.Encoded(attribute.DefaultEncoder())] = uint64(p.Value)
					total += uint64(p.Value)
				}
			}
			if len(series[i]) > 2000 {
				t.Errorf("%s: %s has %d series, want ≤ 2000", path, name, len(series[i]))
			}
			if _, ok := series[i]["otel.metric.overflow=true"]; !ok {
				t.Errorf("%s: %s has no overflow series", path, name)
			}
			if total != uint64(n) {
				t.Errorf("%s: %s counted %d requests, want %d", path, name, total, n)
			}
		}
		if fmt.Sprint(series[0]) != fmt.Sprint(series[1]) {
			t.Errorf("%s: the paths differ: %d series via instruments, %d via the aggregator", name, len(series[0]), len(series[1]))
		}
	}
}
