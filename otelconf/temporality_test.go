package otelconf

import (
	"context"
	"testing"
	"time"

	metricpb "go.opentelemetry.io/proto/otlp/metrics/v1"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/otelstats"
)

// TestTrackerMetricsFollowTemporality: with
// OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE=delta (or lowmemory)
// the tracker's latency histograms and request counters arrive as delta,
// as the rest of the export does: Setup leaves the Aggregator, which is
// cumulative only, out, as it does for exponential histograms. They used to
// arrive cumulative beside the SDK's delta metrics, which a delta-only
// backend refuses and a delta-reading one adds up again at every export.
func TestTrackerMetricsFollowTemporality(t *testing.T) {
	for _, tc := range []struct {
		pref string
		want metricpb.AggregationTemporality
	}{
		{"", metricpb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE},
		{"Delta", metricpb.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA},
		{"lowmemory", metricpb.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA},
	} {
		t.Run("pref="+tc.pref, func(t *testing.T) {
			rec := startReceiver(t, receiverOpts{http: true, metrics: true})
			cleanEnv(t, "OTEL_METRICS_EXPORTER", "otlp", "OTEL_TRACES_EXPORTER", "none", "OTEL_EXPORTER_OTLP_ENDPOINT", rec.Endpoint,
				"OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf", "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", tc.pref)
			p := setup(t, Config{})
			tr, err := otelstats.NewTracker(p.TrackerOptions()...)
			if err != nil {
				t.Fatal(err)
			}
			t0 := time.Now()
			q, _ := tr.Arrive(context.Background(), "r", otelstats.Arrival{Time: t0, Model: "m"})
			_ = q.Detokenized(t0.Add(time.Second), 1, 0)
			_ = q.Finish(t0.Add(2*time.Second), "stop")
			_ = tr.Shutdown(context.Background())
			if err := p.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			if m := rec.metric(attributes.MetricTimeToFirstToken); m == nil || m.GetHistogram().GetAggregationTemporality() != tc.want {
				t.Errorf("TTFT histogram %v; want temporality %v", m, tc.want)
			}
			if m := rec.metric(attributes.MetricRequests); m == nil || m.GetSum().GetAggregationTemporality() != tc.want {
				t.Errorf("requests counter %v; want temporality %v", m, tc.want)
			}
		})
	}
}
