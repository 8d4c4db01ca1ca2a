package otelstats

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/spans"
)

// The Aggregator exports the same histograms as the MeterProvider path
// (bucket counts, counts and sums, per attribute set), and the same
// per-request counters.
func TestAggregatorMatchesInstruments(t *testing.T) {
	sums := map[bool]map[string]int64{}
	collect := func(useAgg bool) map[string]map[string]metricdata.HistogramDataPoint[float64] {
		var agg *Aggregator
		var reader *sdkmetric.ManualReader
		opts := []Option{}
		if useAgg {
			agg = NewAggregator()
			reader = sdkmetric.NewManualReader(sdkmetric.WithProducer(agg))
			opts = append(opts, WithAggregator(agg))
		} else {
			reader = sdkmetric.NewManualReader()
		}
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		tp := sdktrace.NewTracerProvider(sdktrace.WithIDGenerator(spans.IDGenerator()))
		tr, err := NewTracker(append(opts, WithMeterProvider(mp), WithTracerProvider(tp), WithSampling(nil))...)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(7, 7))
		for i := range 300 {
			id := fmt.Sprint("r", i)
			t0 := float64(i) * 100
			reason := "stop"
			if i%10 == 0 {
				reason = "abort"
			}
			req, _ := tr.Arrive(context.Background(), id, Arrival{Time: at(t0), Model: []string{"a", "b"}[i%2]})
			if i%2 == 0 {
				_ = req.InputProcessed(at(t0+0.5), 10, nil)
			}
			_ = tr.Step(&Step{Time: at(t0 + 1), Queued: []string{id}})
			_ = tr.Step(&Step{Time: at(t0 + 2 + rng.Float64()*50), Scheduled: []Scheduled{{RequestID: id, ComputedTokens: 10, CachedTokens: i % 3 * 4}}})
			if i%5 == 0 {
				_ = tr.Step(&Step{Time: at(t0 + 55), Preempted: []string{id}})
				_ = tr.Step(&Step{Time: at(t0 + 58), Scheduled: []Scheduled{{RequestID: id, ComputedTokens: 10}}})
			}
			now := t0 + 60 + rng.Float64()*500
			for k := range 1 + i%7 {
				_ = tr.Step(&Step{Time: at(now), Decoded: []Decoded{{RequestID: id}}})
				if k%2 == 0 || i%3 == 0 {
					_ = req.Detokenized(at(now+0.5), 1, 0)
				}
				now += rng.Float64() * 200
			}
			_ = tr.Step(&Step{Time: at(now), Finished: []Finished{{RequestID: id, Reason: reason}}})
			_ = req.Finish(at(now+1), reason)
		}
		_ = tr.Shutdown(context.Background())
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		out := map[string]map[string]metricdata.HistogramDataPoint[float64]{}
		sums[useAgg] = map[string]int64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if c, ok := m.Data.(metricdata.Sum[int64]); ok {
					if !c.IsMonotonic || c.Temporality != metricdata.CumulativeTemporality {
						t.Errorf("%s: monotonic %v, temporality %v", m.Name, c.IsMonotonic, c.Temporality)
					}
					for _, dp := range c.DataPoints {
						k := m.Name + "{" + dp.Attributes.Encoded(attribute.DefaultEncoder()) + "}"
						if _, dup := sums[useAgg][k]; dup {
							t.Errorf("%s exported twice", k)
						}
						sums[useAgg][k] = dp.Value
					}
				}
				h, ok := m.Data.(metricdata.Histogram[float64])
				if !ok {
					continue
				}
				if out[m.Name] == nil {
					out[m.Name] = map[string]metricdata.HistogramDataPoint[float64]{}
				}
				for _, dp := range h.DataPoints {
					out[m.Name][dp.Attributes.Encoded(attribute.DefaultEncoder())] = dp
				}
			}
		}
		return out
	}
	want, got := collect(false), collect(true)
	if len(want) != 8 || len(got) != 8 {
		t.Fatalf("histograms: instruments %d, aggregator %d, want 8 each", len(want), len(got))
	}
	for name, pts := range want {
		for attrs, w := range pts {
			g, ok := got[name][attrs]
			if !ok {
				t.Errorf("%s{%s}: missing from the aggregator", name, attrs)
				continue
			}
			if g.Count != w.Count || fmt.Sprint(g.BucketCounts) != fmt.Sprint(w.BucketCounts) || fmt.Sprint(g.Bounds) != fmt.Sprint(w.Bounds) {
				t.Errorf("%s{%s}: aggregator count %d buckets %v, instruments %d %v", name, attrs, g.Count, g.BucketCounts, w.Count, w.BucketCounts)
			}
			if math.Abs(g.Sum-w.Sum) > 1e-9*math.Max(1, w.Sum) {
				t.Errorf("%s{%s}: sum %v vs %v", name, attrs, g.Sum, w.Sum)
			}
		}
		if len(got[name]) != len(pts) {
			t.Errorf("%s: %d series in the aggregator, %d via instruments", name, len(got[name]), len(pts))
		}
	}
	if c := got[attributes.MetricInterTokenLatency]; len(c) == 0 {
		t.Fatal("no ITL from the aggregator")
	}
	if fmt.Sprint(sums[true]) != fmt.Sprint(sums[false]) {
		t.Errorf("counters differ:\naggregator  %v\ninstruments %v", sums[true], sums[false])
	}
	for _, name := range []string{attributes.MetricRequests, attributes.MetricPreemptions, attributes.MetricPromptTokens,
		attributes.MetricGenerationTokens, attributes.MetricPrefixCacheQuery, attributes.MetricPrefixCacheHits} {
		found := false
		for k := range sums[true] {
			found = found || len(k) > len(name) && k[:len(name)+1] == name+"{"
		}
		if !found {
			t.Errorf("%s: no series from the aggregator", name)
		}
	}
	_ = time.Second
}

// Prefix-cache counts the engine reports itself go to the Aggregator too,
// once, and the per-request ones stop (as on the instrument path).
func TestAggregatorSchedulerPrefixCache(t *testing.T) {
	agg := NewAggregator()
	reader := sdkmetric.NewManualReader(sdkmetric.WithProducer(agg))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	tr, err := NewTracker(WithMeterProvider(mp), WithAggregator(agg))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr.Shutdown(context.Background()) }()
	tr.RecordSchedulerStats(at(0), SchedulerStats{Running: 1, PrefixCacheQueries: 100, PrefixCacheHits: 40})
	tr.RecordSchedulerStats(at(1), SchedulerStats{Running: 1, PrefixCacheQueries: 10, PrefixCacheHits: 0})
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string][]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if c, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, dp := range c.DataPoints {
					got[m.Name] = append(got[m.Name], dp.Value)
				}
			}
		}
	}
	if fmt.Sprint(got[attributes.MetricPrefixCacheQuery]) != "[110]" || fmt.Sprint(got[attributes.MetricPrefixCacheHits]) != "[40]" {
		t.Errorf("prefix cache sums %v", got)
	}
}

// SPEC §7: a WithPDRole tracker's instance counters carry llm.pd.role —
// the prefix-cache counts its engine reports, its rejections — on the
// Aggregator and the instruments alike, so a prefill and a decode
// instance on one MeterProvider keep apart.
func TestInstanceCountersCarryRole(t *testing.T) {
	for _, viaAgg := range []bool{false, true} {
		t.Run(fmt.Sprint("aggregator=", viaAgg), func(t *testing.T) {
			reader := sdkmetric.NewManualReader()
			var opts [2][]Option
			if viaAgg {
				agg := NewAggregator()
				reader = sdkmetric.NewManualReader(sdkmetric.WithProducer(agg))
				opts[0], opts[1] = []Option{WithAggregator(agg)}, []Option{WithAggregator(agg)}
			}
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			for i, role := range []string{PDRolePrefill, PDRoleDecode} {
				tr, err := NewTracker(append(opts[i], WithMeterProvider(mp), WithPDRole(role))...)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = tr.Shutdown(context.Background()) }()
				n := int64(100 * (i + 1))
				if err := tr.RecordSchedulerStats(at(0), SchedulerStats{Running: 1, PrefixCacheQueries: n, PrefixCacheHits: n / 10}); err != nil {
					t.Fatal(err)
				}
				_ = tr.Record(Update{RequestID: "x", Kind: KindQueued, Time: at(0), Side: SideEngine, Model: "m\xff"})
				_ = tr.RecordSchedulerStats(at(1), SchedulerStats{Running: -1})
			}
			var rm metricdata.ResourceMetrics
			if err := reader.Collect(context.Background(), &rm); err != nil {
				t.Fatal(err)
			}
			got := map[string]int64{}
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					if c, ok := m.Data.(metricdata.Sum[int64]); ok {
						for _, dp := range c.DataPoints {
							role, _ := dp.Attributes.Value(attributes.PDRole)
							got[m.Name+"{"+role.AsString()+"}"] += dp.Value
						}
					}
				}
			}
			for k, want := range map[string]int64{
				attributes.MetricPrefixCacheQuery + "{prefill}": 100, attributes.MetricPrefixCacheQuery + "{decode}": 200,
				attributes.MetricPrefixCacheHits + "{prefill}": 10, attributes.MetricPrefixCacheHits + "{decode}": 20,
				attributes.MetricRejectedUpdates + "{prefill}": 1, attributes.MetricRejectedUpdates + "{decode}": 1,
				attributes.MetricAttributesTruncated + "{prefill}": 1, attributes.MetricAttributesTruncated + "{decode}": 1,
			} {
				if got[k] != want {
					t.Errorf("%s = %d, want %d (all: %v)", k, got[k], want, got)
				}
			}
		})
	}
}
