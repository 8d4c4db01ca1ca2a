package otelconf

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
		{"", 10, true}, // a preempted request: the root and nine children, llm.handoff among them
		{"parentbased_always_on", 10, true},
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

// TestTrackerEnvironment: LLMTRACE_SAMPLING, LLMTRACE_DETAIL and the GenAI
// content variable reach the tracker through TrackerOptions (the library
// reads no environment itself); bad values fail Setup with the variable's
// name.
func TestTrackerEnvironment(t *testing.T) {
	for _, tc := range []struct {
		name, sampling, detail string
		wantSampled            bool
		wantReason             string
		wantSetupErr           string
	}{
		{name: "defaults", wantSampled: true, wantReason: otelstats.SampledAll},
		{name: "policy keeps nothing ordinary", sampling: "errors,ratio=0", wantSampled: false},
		{name: "policy keeps errors", sampling: "errors", wantSampled: false},
		{name: "bad policy", sampling: "ratio=2", wantSetupErr: EnvSampling},
		{name: "bad detail", detail: "9", wantSetupErr: EnvDetail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{EnvSampling: tc.sampling, EnvDetail: tc.detail}
			p, err := Setup(context.Background(), Config{Getenv: func(k string) string { return env[k] }})
			if tc.wantSetupErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantSetupErr) {
					t.Fatalf("Setup error %v, want one naming %s", err, tc.wantSetupErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = p.Shutdown(context.Background()) }()
			var got []otelstats.RequestStats
			tr, err := otelstats.NewTracker(append(p.TrackerOptions(),
				otelstats.WithOnFinish(func(s *otelstats.RequestStats) { got = append(got, *s) }))...)
			if err != nil {
				t.Fatal(err)
			}
			t0 := time.Unix(1700000000, 0)
			q, _ := tr.Arrive(context.Background(), "r", otelstats.Arrival{Time: t0, Model: "m"})
			_ = q.Detokenized(t0.Add(time.Millisecond), 1, 0)
			_ = q.Finish(t0.Add(2*time.Millisecond), "stop")
			_ = tr.Shutdown(context.Background())
			if len(got) != 1 || got[0].Sampled != tc.wantSampled || tc.wantReason != "" && got[0].SamplingReason != tc.wantReason {
				t.Fatalf("stats %+v, want sampled=%v reason %q", got, tc.wantSampled, tc.wantReason)
			}
		})
	}
}
