package otelconf

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/otelstats"
)

// TestExemplarFilterAlwaysOff: OTEL_METRICS_EXEMPLAR_FILTER=always_off
// (the specification's: no measurement is an exemplar) leaves every
// latency histogram without exemplars. The SDK's instruments follow the
// variable, but the Aggregator attaches one per bucket whatever it says,
// so Setup leaves the Aggregator out then, as for delta temporality.
// trace_based, the default, keeps the exemplars that link a histogram to
// its kept traces; a value not recognised is warned about (the SDK says
// nothing) and trace_based applies.
func TestExemplarFilterAlwaysOff(t *testing.T) {
	for _, tc := range []struct {
		filter    string
		exemplars bool
		warned    bool
	}{
		{"", true, false},
		{"trace_based", true, false},
		{"always_off", false, false},
		{" Always_Off", false, false}, // enum values in any case, as the SDK reads them
		{"never", true, true},         // not recognised: warned about, trace_based applies
	} {
		t.Run("filter="+tc.filter, func(t *testing.T) {
			rec := startReceiver(t, receiverOpts{http: true, metrics: true})
			cleanEnv(t, "OTEL_METRICS_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT", rec.Endpoint,
				"OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf", "OTEL_METRICS_EXEMPLAR_FILTER", tc.filter)
			errs := captureErrors(t)
			p := setup(t, Config{})
			tr, err := otelstats.NewTracker(append(p.TrackerOptions(), otelstats.WithTraces(true))...)
			if err != nil {
				t.Fatal(err)
			}
			t0 := time.Now()
			q, _ := tr.Arrive(context.Background(), "r", otelstats.Arrival{Time: t0, Model: "m"})
			_ = q.Detokenized(t0.Add(30*time.Millisecond), 1, 0)
			_ = q.Finish(t0.Add(40*time.Millisecond), "stop")
			_ = tr.Shutdown(context.Background())
			if err := p.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			m := rec.metric(attributes.MetricTimeToFirstToken)
			if m == nil {
				t.Fatal("the TTFT histogram did not arrive")
			}
			n := 0
			for _, dp := range m.GetHistogram().GetDataPoints() {
				n += len(dp.Exemplars)
			}
			if (n > 0) != tc.exemplars {
				t.Errorf("%d exemplars, want some: %v", n, tc.exemplars)
			}
			warned := strings.Contains(fmt.Sprint(errs.all()), "OTEL_METRICS_EXEMPLAR_FILTER")
			if warned != tc.warned {
				t.Errorf("warned %v, want %v: %v", warned, tc.warned, errs.all())
			}
		})
	}
}
