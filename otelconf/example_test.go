package otelconf_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/llmtrace/llmtrace/otelconf"
	"github.com/llmtrace/llmtrace/otelstats"
)

// Setup builds the providers from OTEL_* (here, with no OTLP variable set,
// nothing is pushed); the tracker takes its options, and the Prometheus
// handler serves the latency histograms of the Aggregator Setup registered.
func ExampleSetup() {
	ctx := context.Background()
	prov, err := otelconf.Setup(ctx, otelconf.Config{ServiceName: "my-engine", Prometheus: true})
	if err != nil {
		panic(err)
	}
	defer prov.Shutdown(context.Background())
	tracker, err := otelstats.NewTracker(prov.TrackerOptions()...)
	if err != nil {
		panic(err)
	}

	t0 := time.Now()
	req, _ := tracker.Arrive(ctx, "req-1", otelstats.Arrival{Time: t0, Model: "llama"})
	_ = req.Detokenized(t0.Add(40*time.Millisecond), 1, 0)
	_ = req.Finish(t0.Add(90*time.Millisecond), otelstats.FinishStop)
	_ = tracker.Shutdown(ctx)

	w := httptest.NewRecorder()
	prov.MetricsHandler.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	for line := range strings.Lines(w.Body.String()) {
		if strings.HasPrefix(line, "gen_ai_server_time_to_first_token_seconds_count{") && strings.Contains(line, `gen_ai_request_model="llama"`) {
			fmt.Print(line[strings.LastIndexByte(line, ' ')+1:])
		}
	}
	// Output: 1
}
