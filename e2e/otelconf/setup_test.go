package otelconf

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/llmtrace/llmtrace/e2e/testbackend"
	"github.com/llmtrace/llmtrace/internal/freeport"
	"github.com/llmtrace/llmtrace/otelconf"
	"github.com/llmtrace/llmtrace/otelstats"
)

func TestMain(m *testing.M) {
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		sink.Lock()
		defer sink.Unlock()
		sink.errs = append(sink.errs, err)
	}))
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// sink keeps what otel.Handle got; tests in this package do not run in
// parallel, and each takes the errors reported during it.
var sink struct {
	sync.Mutex
	errs []error
}

func takeErrors() []error {
	sink.Lock()
	defer sink.Unlock()
	e := sink.errs
	sink.errs = nil
	return e
}

func exportErrors(errs []error, signal string) []*otelconf.ExportError {
	var out []*otelconf.ExportError
	for _, err := range errs {
		var xe *otelconf.ExportError
		if errors.As(err, &xe) && xe.Signal == signal {
			out = append(out, xe)
		}
	}
	return out
}

// cleanEnv empties every variable these tests or the machine might set,
// then sets kv pairs.
func cleanEnv(t *testing.T, kv ...string) {
	for _, k := range []string{
		"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_METRICS_PRODUCERS",
		"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
		"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
		"OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
		"OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_METRIC_EXPORT_INTERVAL",
		"OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "OTEL_BSP_SCHEDULE_DELAY", "OTEL_BSP_EXPORT_TIMEOUT",
		"OTEL_EXPORTER_PROMETHEUS_HOST", "OTEL_EXPORTER_PROMETHEUS_PORT",
		"LLMTRACE_SAMPLING", "LLMTRACE_DETAIL", "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
	} {
		t.Setenv(k, "")
	}
	for i := 0; i+1 < len(kv); i += 2 {
		t.Setenv(kv[i], kv[i+1])
	}
}

// record finishes n streamed requests on tr.
func record(t *testing.T, tr *otelstats.Tracker, n int) {
	fatal := func(err error) { panic(err) }
	if t != nil {
		t.Helper()
		fatal = func(err error) { t.Helper(); t.Fatal(err) }
	}
	t0 := time.Now()
	for i := range n {
		q, err := tr.Arrive(context.Background(), "req-"+strconv.Itoa(i), otelstats.Arrival{Time: t0, Model: "m"})
		if err != nil {
			fatal(err)
		}
		_ = q.InputProcessed(t0.Add(time.Millisecond), 16, nil)
		_ = tr.Step(&otelstats.Step{Time: t0.Add(2 * time.Millisecond), QueuedReqs: []*otelstats.Request{q}})
		_ = tr.Step(&otelstats.Step{Time: t0.Add(3 * time.Millisecond), Scheduled: []otelstats.Scheduled{{Req: q, ComputedTokens: 16}}})
		for k := range 3 {
			at := t0.Add(time.Duration(10+10*k) * time.Millisecond)
			_ = tr.Step(&otelstats.Step{Time: at, Decoded: []otelstats.Decoded{{Req: q}}})
			_ = q.Detokenized(at, 1, 0)
		}
		_ = tr.Step(&otelstats.Step{Time: t0.Add(31 * time.Millisecond), Finished: []otelstats.Finished{{Req: q, Reason: otelstats.FinishStop}}})
		if err := q.Finish(t0.Add(32*time.Millisecond), otelstats.FinishStop); err != nil {
			fatal(err)
		}
	}
}

// spansPerRequest is how many spans one of record's requests has, counted
// through an in-memory processor (the tree is the span builder's to
// decide).
var spansPerRequest = func() int64 {
	mem := tracetest.NewSpanRecorder()
	tr, err := otelstats.NewTracker(otelstats.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(mem))))
	if err != nil {
		panic(err)
	}
	record(nil, tr, 1)
	_ = tr.Shutdown(context.Background())
	return int64(len(mem.Ended()))
}()

// TestJaegerOverBothProtocols exports a tracker's traces and metrics to a
// real Jaeger over gRPC (llmtrace's default, port "4317") and over
// http/protobuf (port "4318"): every trace lands whole with the service
// name from OTEL_SERVICE_NAME; Jaeger refuses the metrics, which costs one
// warning naming the cause and no error; Status says what landed.
func TestJaegerOverBothProtocols(t *testing.T) {
	j := testbackend.StartJaeger(t)
	for _, tc := range []struct{ protocol, endpoint string }{
		{"", "http://" + j.OTLPGRPCEndpoint()},
		{"http/protobuf", "http://" + j.OTLPHTTPEndpoint()},
	} {
		t.Run("protocol="+tc.protocol, func(t *testing.T) {
			service := "otelconf-e2e-" + strings.ReplaceAll(tc.protocol, "/", "-")
			cleanEnv(t, "OTEL_EXPORTER_OTLP_ENDPOINT", tc.endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL", tc.protocol,
				"OTEL_SERVICE_NAME", service, "OTEL_METRIC_EXPORT_INTERVAL", "100", "OTEL_BSP_SCHEDULE_DELAY", "50")
			takeErrors()
			prov, err := otelconf.Setup(context.Background(), otelconf.Config{})
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			tr, err := otelstats.NewTracker(append(prov.TrackerOptions(),
				otelstats.WithOnFinish(func(s *otelstats.RequestStats) { ids = append(ids, s.TraceID) }))...)
			if err != nil {
				t.Fatal(err)
			}
			const n = 20
			record(t, tr, n)
			_ = tr.Shutdown(context.Background())
			// Some metric exports are refused before Shutdown's own.
			deadline := time.Now().Add(30 * time.Second)
			for prov.Status().Metrics.Failures < 2 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if err := prov.Shutdown(context.Background()); err != nil {
				t.Fatalf("Shutdown: %v", err)
			}
			for _, id := range ids {
				trace, err := j.WaitTrace(context.Background(), id, int(spansPerRequest))
				if err != nil {
					t.Fatal(err)
				}
				root, _ := trace.Root()
				if root.ServiceName != service {
					t.Errorf("trace %s: service %q, want %q", id, root.ServiceName, service)
				}
			}
			st := prov.Status()
			t.Log(st)
			if len(ids) != n || st.Traces.Produced != n*spansPerRequest || st.Traces.Exported != st.Traces.Produced {
				t.Errorf("%d traces; status %+v", len(ids), st.Traces)
			}
			if !st.Metrics.Refused() || st.Metrics.Failures < 2 {
				t.Errorf("metrics status %+v: want refused exports", st.Metrics)
			}
			errs := takeErrors()
			xes := exportErrors(errs, "metrics")
			if len(xes) != 1 || xes[0].Cause != otelconf.CauseRefused || len(errs) != 1 {
				t.Errorf("reports %v: want one, the metrics refusal", errs)
			} else {
				t.Logf("the one warning: %v", xes[0])
			}
		})
	}
}

// TestJaegerWrongPort points each protocol at Jaeger's other port (issue
// 14: gRPC at :4318 used to drop everything with "http2: frame too large"
// and say nothing): the first failure names the cause and the variable,
// nothing lands, and every span is counted as dropped.
func TestJaegerWrongPort(t *testing.T) {
	j := testbackend.StartJaeger(t)
	for _, tc := range []struct {
		protocol, endpoint string
		want               otelconf.Cause
	}{
		{"", "http://" + j.OTLPHTTPEndpoint(), otelconf.CauseNotGRPC},
		{"http/protobuf", "http://" + j.OTLPGRPCEndpoint(), otelconf.CauseNotHTTP},
	} {
		t.Run("protocol="+tc.protocol, func(t *testing.T) {
			service := "otelconf-wrong-" + strings.ReplaceAll(tc.protocol, "/", "-")
			cleanEnv(t, "OTEL_EXPORTER_OTLP_ENDPOINT", tc.endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL", tc.protocol,
				"OTEL_SERVICE_NAME", service, "OTEL_METRICS_EXPORTER", "none",
				"OTEL_EXPORTER_OTLP_TIMEOUT", "1000", "OTEL_BSP_SCHEDULE_DELAY", "50")
			takeErrors()
			prov, err := otelconf.Setup(context.Background(), otelconf.Config{})
			if err != nil {
				t.Fatal(err)
			}
			tr, err := otelstats.NewTracker(prov.TrackerOptions()...)
			if err != nil {
				t.Fatal(err)
			}
			record(t, tr, 5)
			_ = tr.Shutdown(context.Background())
			deadline := time.Now().Add(30 * time.Second)
			for prov.Status().Traces.Failures == 0 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			_ = prov.Shutdown(context.Background())
			st := prov.Status()
			t.Log(st)
			xes := exportErrors(takeErrors(), "traces")
			if len(xes) != 1 || xes[0].Cause != tc.want || !strings.Contains(xes[0].Error(), "OTEL_EXPORTER_OTLP_PROTOCOL=") {
				t.Fatalf("reports %v: want one naming %v and OTEL_EXPORTER_OTLP_PROTOCOL", xes, tc.want)
			}
			t.Logf("the warning: %v", xes[0])
			if st.Traces.Exported != 0 || st.Traces.Dropped != st.Traces.Produced || st.Traces.Produced != 5*spansPerRequest {
				t.Errorf("traces %+v", st.Traces)
			}
			services, err := j.Services(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range services {
				if s == service {
					t.Errorf("Jaeger has service %s: spans landed through the wrong port", s)
				}
			}
		})
	}
}

// TestPrometheusScrapes: OTEL_METRICS_EXPORTER=prometheus serves /metrics on
// OTEL_EXPORTER_PROMETHEUS_HOST:PORT, and a real Prometheus scraping it
// gets the Aggregator's latency histograms and the resource's service name.
func TestPrometheusScrapes(t *testing.T) {
	port := freePort(t)
	cleanEnv(t, "OTEL_METRICS_EXPORTER", "prometheus", "OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1",
		"OTEL_EXPORTER_PROMETHEUS_PORT", port, "OTEL_SERVICE_NAME", "otelconf-prom")
	prov, err := otelconf.Setup(context.Background(), otelconf.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer prov.Shutdown(context.Background())
	tr, err := otelstats.NewTracker(prov.TrackerOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	record(t, tr, 7)
	_ = tr.Shutdown(context.Background())
	prom := testbackend.StartPrometheus(t, []string{"127.0.0.1:" + port}, 100*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	got, err := prom.WaitForSeries(ctx, `sum(gen_ai_server_time_to_first_token_seconds_count)`)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Value != 7 {
		t.Errorf("TTFT count %v, want 7", got)
	}
	if _, err := prom.WaitForSeries(ctx, `target_info{service_name="otelconf-prom"}`); err != nil {
		t.Fatal(err)
	}
	if s := prov.Status().String(); !strings.Contains(s, "served at http://127.0.0.1:"+port+"/metrics") {
		t.Errorf("Status() = %q", s)
	}
}

func freePort(t *testing.T) string { return strconv.Itoa(freeport.Port(t)) }
