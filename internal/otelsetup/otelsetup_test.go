package otelsetup

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/llmtrace/llmtrace/otelstats"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestTrackerOptions: a tracker built from TrackerOptions sends its spans to
// every processor of the TracerProvider and its latency histograms through
// the Aggregator Setup registered on the Prometheus reader; a non-default
// OTEL_TRACES_SAMPLER keeps the Tracer path so that sampler still decides.
func TestTrackerOptions(t *testing.T) {
	for _, tc := range []struct {
		sampler   string
		wantSpans int
		direct    bool
	}{
		{"", 9, true},
		{"parentbased_always_on", 9, true},
		{"always_off", 0, false},
	} {
		t.Run("sampler="+tc.sampler, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			// The SDK reads the sampler from the process environment.
			t.Setenv("OTEL_TRACES_SAMPLER", tc.sampler)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
			p, err := Setup(context.Background(), Config{
				ServiceName: "setup-test", SpanProcessors: []sdktrace.SpanProcessor{rec}, Prometheus: true,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = p.Shutdown(context.Background()) }()
			if p.Aggregator == nil || p.direct != tc.direct {
				t.Fatalf("aggregator %v, direct %v; want one, %v", p.Aggregator, p.direct, tc.direct)
			}
			tr, err := otelstats.NewTracker(p.TrackerOptions()...)
			if err != nil {
				t.Fatal(err)
			}
			request(t, tr)
			if err := tr.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			ended := rec.Ended()
			if len(ended) != tc.wantSpans {
				t.Fatalf("%d spans reached the processor, want %d", len(ended), tc.wantSpans)
			}
			for _, s := range ended {
				if v, _ := s.Resource().Set().Value("service.name"); v.AsString() != "setup-test" {
					t.Errorf("span %s: service.name %q", s.Name(), v.AsString())
				}
			}
			w := httptest.NewRecorder()
			p.MetricsHandler.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
			body, _ := io.ReadAll(w.Result().Body)
			if !strings.Contains(string(body), "gen_ai_server_time_to_first_token_seconds_count") ||
				!strings.Contains(string(body), "llm_inter_token_latency") && !strings.Contains(string(body), "gen_ai_server_time_per_output_token") {
				t.Errorf("latency histograms missing from /metrics:\n%.2000s", body)
			}
		})
	}
}

// request records one preempted, streamed request.
func request(t *testing.T, tr *otelstats.Tracker) {
	t.Helper()
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	q, err := tr.Arrive(context.Background(), "r1", otelstats.Arrival{Time: at(0), Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(q.InputProcessed(at(1), 8, nil))
	must(tr.Step(&otelstats.Step{Time: at(2), QueuedReqs: []*otelstats.Request{q}}))
	must(tr.Step(&otelstats.Step{Time: at(3), Scheduled: []otelstats.Scheduled{{Req: q, ComputedTokens: 8}}}))
	for i := range 4 {
		must(tr.Step(&otelstats.Step{Time: at(10 + 10*i), Decoded: []otelstats.Decoded{{Req: q}}}))
		must(q.Detokenized(at(11+10*i), 1, 0))
	}
	must(tr.Step(&otelstats.Step{Time: at(50), PreemptedReqs: []*otelstats.Request{q}}))
	must(tr.Step(&otelstats.Step{Time: at(60), Scheduled: []otelstats.Scheduled{{Req: q, ComputedTokens: 12}}}))
	must(tr.Step(&otelstats.Step{Time: at(70), Decoded: []otelstats.Decoded{{Req: q}}}))
	must(q.Detokenized(at(71), 1, 0))
	must(tr.Step(&otelstats.Step{Time: at(80), Finished: []otelstats.Finished{{Req: q, Reason: otelstats.FinishStop}}}))
	must(q.Finish(at(81), otelstats.FinishStop))
}
