package otelconf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/otelstats"
)

func TestMain(m *testing.M) {
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		errSink.Lock()
		defer errSink.Unlock()
		if errSink.f != nil {
			errSink.f(err)
		}
	}))
	goleak.VerifyTestMain(m)
}

// errSink receives what otel.Handle gets, for the test that asks.
var errSink struct {
	sync.Mutex
	f func(error)
}

// errorLog collects otel.Handle's errors during one test.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func captureErrors(t *testing.T) *errorLog {
	l := &errorLog{}
	errSink.Lock()
	errSink.f = func(err error) { l.mu.Lock(); l.errs = append(l.errs, err); l.mu.Unlock() }
	errSink.Unlock()
	t.Cleanup(func() { errSink.Lock(); errSink.f = nil; errSink.Unlock() })
	return l
}

func (l *errorLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

// exportErrors are the *ExportError among the errors, of signal.
func (l *errorLog) exportErrors(signal string) []*ExportError {
	var out []*ExportError
	for _, err := range l.all() {
		var xe *ExportError
		if errors.As(err, &xe) && xe.Signal == signal {
			out = append(out, xe)
		}
	}
	return out
}

// envVars are every variable Setup, the SDK or the exporters read that a
// test may set; cleanEnv empties them for one test.
var envVars = []string{
	"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_METRICS_PRODUCERS",
	"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
	"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
	"OTEL_EXPORTER_OTLP_INSECURE", "OTEL_EXPORTER_OTLP_TRACES_INSECURE", "OTEL_EXPORTER_OTLP_METRICS_INSECURE",
	"OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
	"OTEL_EXPORTER_OTLP_COMPRESSION", "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "OTEL_EXPORTER_OTLP_METRICS_COMPRESSION",
	"OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION", "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE",
	"OTEL_EXPORTER_PROMETHEUS_HOST", "OTEL_EXPORTER_PROMETHEUS_PORT",
	"OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
	"OTEL_METRIC_EXPORT_INTERVAL", "OTEL_METRIC_EXPORT_TIMEOUT", "OTEL_METRICS_EXEMPLAR_FILTER",
	"OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "OTEL_BSP_SCHEDULE_DELAY", "OTEL_BSP_EXPORT_TIMEOUT",
	EnvSampling, EnvDetail, EnvCaptureContent, EnvPropagators,
}

func cleanEnv(t *testing.T, set ...string) {
	t.Helper()
	for _, k := range envVars {
		t.Setenv(k, "")
	}
	for i := 0; i+1 < len(set); i += 2 {
		t.Setenv(set[i], set[i+1])
	}
}

func setup(t *testing.T, c Config) *Providers {
	t.Helper()
	p, err := Setup(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	return p
}

// TestSelect: what the exporter and protocol variables select, and the
// errors that name the variable at fault.
func TestSelect(t *testing.T) {
	for _, tc := range []struct {
		name             string
		env              []string
		override         string
		signal           string
		exporter, target string
		wantErr          string
	}{
		{name: "nothing set", signal: "traces"},
		{name: "endpoint: otlp over grpc", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:4317"}, signal: "traces",
			exporter: "otlp", target: "http://h:4317 (otlp/grpc)"},
		{name: "per-signal endpoint only for the other signal", env: []string{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://h:4317"}, signal: "traces"},
		{name: "http/protobuf adds the signal's path", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:4318/", "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"},
			signal: "metrics", exporter: "otlp", target: "http://h:4318/v1/metrics (otlp/http/protobuf)"},
		{name: "per-signal endpoint used as is", env: []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://h:4318/custom", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"},
			signal: "traces", exporter: "otlp", target: "http://h:4318/custom (otlp/http/protobuf)"},
		{name: "per-signal protocol wins", env: []string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"},
			signal: "traces", exporter: "otlp", target: "http://localhost:4317 (otlp/grpc)"},
		{name: "otlp named without endpoint: the default one", env: []string{"OTEL_METRICS_EXPORTER", "OTLP", "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"},
			signal: "metrics", exporter: "otlp", target: "http://localhost:4318/v1/metrics (otlp/http/protobuf)"},
		{name: "none wins over an endpoint", env: []string{"OTEL_TRACES_EXPORTER", "none", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:4317"}, signal: "traces"},
		{name: "console", env: []string{"OTEL_TRACES_EXPORTER", "console"}, signal: "traces", exporter: "console", target: "stdout (console)"},
		{name: "prometheus", env: []string{"OTEL_METRICS_EXPORTER", "prometheus", "OTEL_EXPORTER_PROMETHEUS_PORT", "9999"}, signal: "metrics",
			exporter: "prometheus", target: "http://localhost:9999/metrics (prometheus)"},
		{name: "override host:port", override: "127.0.0.1:4317", env: []string{"OTEL_TRACES_EXPORTER", "none"}, signal: "traces",
			exporter: "otlp", target: "http://127.0.0.1:4317 (otlp/grpc)"},
		{name: "override over http gets the path", override: "https://c:4318", env: []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"}, signal: "traces",
			exporter: "otlp", target: "https://c:4318/v1/traces (otlp/http/protobuf)"},
		// The exporters trim values: so does Setup, and a blank one is unset.
		{name: "endpoint in spaces", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT", " http://h:4318 ", "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"}, signal: "traces",
			exporter: "otlp", target: "http://h:4318/v1/traces (otlp/http/protobuf)"},
		{name: "blank endpoint is unset", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "  "}, signal: "traces"},
		// gRPC takes any target grpc-go does (TLS unless OTEL_EXPORTER_OTLP_INSECURE=true).
		{name: "grpc host:port", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317"}, signal: "metrics",
			exporter: "otlp", target: "collector:4317 (otlp/grpc)"},
		{name: "http/json", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:4318", "OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"}, signal: "traces",
			wantErr: `OTEL_EXPORTER_OTLP_PROTOCOL="http/json"`},
		{name: "unknown protocol", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:4318", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http"}, signal: "metrics",
			wantErr: "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"},
		{name: "a list", env: []string{"OTEL_TRACES_EXPORTER", "otlp,console"}, signal: "traces", wantErr: "OTEL_TRACES_EXPORTER"},
		{name: "bad override", override: "nowhere", signal: "traces", wantErr: "host:port"},
		{name: "override with another scheme", override: "ftp://h:1", signal: "traces", wantErr: "http(s) URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cleanEnv(t, tc.env...)
			sel, err := selectSignal(tc.signal, tc.override)
			if tc.wantErr != "" {
				var ce *ConfigError
				if !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want a ConfigError naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if sel.exporter != tc.exporter || tc.exporter != "" && sel.target() != tc.target {
				t.Errorf("exporter %q target %q, want %q %q", sel.exporter, sel.target(), tc.exporter, tc.target)
			}
		})
	}
}

// TestExportOverBothProtocols sends a tracker's spans and metrics to a
// real OTLP receiver over gRPC (the default) and over HTTP: the service
// name, resource attributes and headers from the environment arrive, the
// Aggregator's histograms are exported, and Status accounts for every span.
func TestExportOverBothProtocols(t *testing.T) {
	for _, proto := range []string{"", "http/protobuf"} {
		t.Run("protocol="+proto, func(t *testing.T) {
			rec := startReceiver(t, receiverOpts{http: proto != "", traces: true, metrics: true})
			cleanEnv(t,
				"OTEL_EXPORTER_OTLP_ENDPOINT", rec.Endpoint,
				"OTEL_EXPORTER_OTLP_PROTOCOL", proto,
				"OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=acme",
				"OTEL_SERVICE_NAME", "from-env",
				"OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test",
				"OTEL_METRIC_EXPORT_INTERVAL", "50",
				"OTEL_BSP_SCHEDULE_DELAY", "20",
			)
			errs := captureErrors(t)
			p := setup(t, Config{ServiceName: "from-config"})
			if !p.TracesExported || !p.MetricsExported {
				t.Fatalf("traces %v metrics %v exported; want both", p.TracesExported, p.MetricsExported)
			}
			tr, err := otelstats.NewTracker(p.TrackerOptions()...)
			if err != nil {
				t.Fatal(err)
			}
			request(t, tr)
			if err := tr.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "a metric export with the TTFT histogram", func() bool { return rec.metric("gen_ai.server.time_to_first_token") != nil })
			if err := p.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			if n := rec.spanCount(); n != treeSpans {
				t.Errorf("receiver got %d spans, want %d", n, treeSpans)
			}
			for _, r := range rec.resources() {
				if r["service.name"] != "from-env" || r["deployment.environment.name"] != "test" {
					t.Errorf("resource %v: want service.name from OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES", r)
				}
			}
			for _, h := range rec.allHeaders() {
				if h["X-Tenant"] != "acme" {
					t.Errorf("headers %v lack x-tenant from OTEL_EXPORTER_OTLP_HEADERS", h)
				}
			}
			st := p.Status()
			if st.Traces.Produced != int64(treeSpans) || st.Traces.Exported != int64(treeSpans) || st.Traces.Dropped != 0 || st.Traces.Err != nil {
				t.Errorf("traces status %+v, want %d produced and exported", st.Traces, treeSpans)
			}
			if st.Metrics.Exports == 0 || st.Metrics.Failures != 0 {
				t.Errorf("metrics status %+v", st.Metrics)
			}
			want := "traces: " + itoa(treeSpans) + " of " + itoa(treeSpans) + " spans exported to " + rec.Endpoint
			if s := st.String(); !strings.HasPrefix(s, want) || !strings.Contains(s, "; metrics: ") {
				t.Errorf("Status() = %q, want it to start %q", s, want)
			}
			if e := errs.all(); len(e) != 0 {
				t.Errorf("errors reported: %v", e)
			}
		})
	}
}

// TestWrongProtocolNamesTheCause points each exporter at a receiver of the
// other protocol: nothing arrives, the first failure of each signal is
// reported once with the likely cause and the variable to change, every
// span is counted as dropped, and Shutdown does not fail.
func TestWrongProtocolNamesTheCause(t *testing.T) {
	for _, tc := range []struct {
		name      string
		recHTTP   bool
		protocol  string
		wantCause Cause
	}{
		{name: "grpc to an OTLP/HTTP endpoint", recHTTP: true, wantCause: CauseNotGRPC},
		{name: "http/protobuf to an OTLP/gRPC endpoint", protocol: "http/protobuf", wantCause: CauseNotHTTP},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := startReceiver(t, receiverOpts{http: tc.recHTTP, traces: true, metrics: true})
			cleanEnv(t,
				"OTEL_EXPORTER_OTLP_ENDPOINT", rec.Endpoint,
				"OTEL_EXPORTER_OTLP_PROTOCOL", tc.protocol,
				"OTEL_EXPORTER_OTLP_TIMEOUT", "300", // a gRPC exporter retries until then
				"OTEL_BSP_SCHEDULE_DELAY", "20",
				"OTEL_METRIC_EXPORT_INTERVAL", "50",
			)
			errs := captureErrors(t)
			p := setup(t, Config{})
			recordOne(t, p)
			waitFor(t, "a failed export of each signal", func() bool {
				return len(errs.exportErrors("traces")) > 0 && len(errs.exportErrors("metrics")) > 0
			})
			if err := p.Shutdown(context.Background()); err != nil {
				t.Errorf("Shutdown: %v", err)
			}
			for _, sig := range []string{"traces", "metrics"} {
				xes := errs.exportErrors(sig)
				if len(xes) != 1 {
					t.Errorf("%s: %d reports, want one: %v", sig, len(xes), xes)
					continue
				}
				xe := xes[0]
				if xe.Cause != tc.wantCause || !strings.Contains(xe.Error(), "OTEL_EXPORTER_OTLP_PROTOCOL=") || !strings.Contains(xe.Error(), rec.Endpoint) {
					t.Errorf("%s: cause %v, message %q; want %v naming the endpoint and OTEL_EXPORTER_OTLP_PROTOCOL", sig, xe.Cause, xe, tc.wantCause)
				}
			}
			st := p.Status()
			if st.Traces.Exported != 0 || st.Traces.Produced != int64(treeSpans) || st.Traces.Dropped != int64(treeSpans) {
				t.Errorf("traces %+v: want %d produced, 0 exported, all dropped", st.Traces, treeSpans)
			}
			if !strings.Contains(st.String(), "last failure: "+tc.wantCause.String()) {
				t.Errorf("Status() = %q does not name the cause", st)
			}
			if rec.spanCount() != 0 {
				t.Errorf("%d spans arrived through the wrong protocol", rec.spanCount())
			}
		})
	}
}

// TestRefusedSignal: a backend that takes traces only (as Jaeger does),
// over gRPC (Unimplemented) and HTTP (404): the traces land, the metrics
// refusal is reported once however many intervals pass, and Shutdown
// succeeds.
func TestRefusedSignal(t *testing.T) {
	for _, proto := range []string{"", "http/protobuf"} {
		t.Run("protocol="+proto, func(t *testing.T) {
			rec := startReceiver(t, receiverOpts{http: proto != "", traces: true})
			cleanEnv(t,
				"OTEL_EXPORTER_OTLP_ENDPOINT", rec.Endpoint,
				"OTEL_EXPORTER_OTLP_PROTOCOL", proto,
				"OTEL_METRIC_EXPORT_INTERVAL", "20",
			)
			errs := captureErrors(t)
			p := setup(t, Config{})
			recordOne(t, p)
			waitFor(t, "three refused metric exports", func() bool { return p.Status().Metrics.Failures >= 3 })
			if err := p.Shutdown(context.Background()); err != nil {
				t.Errorf("Shutdown: %v", err)
			}
			if rec.spanCount() != treeSpans {
				t.Errorf("%d spans landed, want %d", rec.spanCount(), treeSpans)
			}
			xes := errs.exportErrors("metrics")
			if len(xes) != 1 || xes[0].Cause != CauseRefused || !strings.Contains(xes[0].Error(), "OTEL_METRICS_EXPORTER=none") {
				t.Fatalf("reports %v, want one refusal naming OTEL_METRICS_EXPORTER=none", xes)
			}
			st := p.Status()
			if !st.Metrics.Refused() || st.Traces.Exported != int64(treeSpans) {
				t.Errorf("status %+v", st)
			}
			if s := st.String(); !strings.Contains(s, "refused by the backend") {
				t.Errorf("Status() = %q", s)
			}
			// The SDK's periodic reader may start one last collection as
			// Shutdown cancels its loop, and reports that collection's
			// "context canceled" itself (an upstream race, more likely at
			// a 20 ms interval): not an export failure.
			var e []error
			for _, err := range errs.all() {
				var xe *ExportError
				if errors.As(err, &xe) || !errors.Is(err, context.Canceled) {
					e = append(e, err)
				}
			}
			if len(e) != 1 {
				t.Errorf("%d errors reported, want the one refusal: %v", len(e), e)
			}
		})
	}
}

// TestSDKDisabled: OTEL_SDK_DISABLED=true exports nothing anywhere; the
// program's own processors still get spans; the Prometheus handler says
// why it has nothing. Another value is reported and ignored.
func TestSDKDisabled(t *testing.T) {
	for _, tc := range []struct {
		value    string
		disabled bool
		warned   bool
	}{
		{"true", true, false},
		{"TRUE", true, false},
		{"false", false, false},
		{"yes", false, true},
	} {
		t.Run(tc.value, func(t *testing.T) {
			rec := startReceiver(t, receiverOpts{traces: true, metrics: true})
			cleanEnv(t, "OTEL_SDK_DISABLED", tc.value, "OTEL_EXPORTER_OTLP_ENDPOINT", rec.Endpoint)
			errs := captureErrors(t)
			mem := tracetest.NewSpanRecorder()
			p := setup(t, Config{Prometheus: true, SpanProcessors: []sdktrace.SpanProcessor{mem}})
			recordOne(t, p)
			if err := p.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			if len(mem.Ended()) != treeSpans {
				t.Errorf("the program's processor got %d spans, want %d", len(mem.Ended()), treeSpans)
			}
			if got := rec.spanCount() > 0; got == tc.disabled {
				t.Errorf("spans exported: %v with OTEL_SDK_DISABLED=%s", got, tc.value)
			}
			if p.TracesExported == tc.disabled || p.Status().Disabled != tc.disabled {
				t.Errorf("TracesExported %v, Status %+v", p.TracesExported, p.Status())
			}
			w := httptest.NewRecorder()
			p.MetricsHandler.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
			if (w.Code == 503) != tc.disabled || tc.disabled && !strings.Contains(w.Body.String(), "OTEL_SDK_DISABLED") {
				t.Errorf("/metrics: %d %q", w.Code, w.Body.String())
			}
			if warned := len(errs.all()) > 0; warned != tc.warned {
				t.Errorf("warned %v, want %v: %v", warned, tc.warned, errs.all())
			}
		})
	}
}

// TestConsoleExporters: OTEL_TRACES_EXPORTER=console and
// OTEL_METRICS_EXPORTER=console write to stdout through autoexport; the
// metrics carry the Aggregator's histograms, and the batch processor
// accounts for every span. The exporters hold the process's stdout, so the
// test runs itself as a child and reads the child's.
func TestConsoleExporters(t *testing.T) {
	if os.Getenv("OTELCONF_CONSOLE_CHILD") == "1" {
		consoleChild(t)
		return
	}
	cleanEnv(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestConsoleExporters$", "-test.count=1")
	cmd.Env = append(os.Environ(), "OTELCONF_CONSOLE_CHILD=1", "OTEL_TRACES_EXPORTER=console", "OTEL_METRICS_EXPORTER=console")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v\nstdout:\n%.3000s\nstderr:\n%s", err, out, stderr.String())
	}
	for _, want := range []string{`"Name":"llm.decode"`, `"Name":"chat m"`, `"Name":"gen_ai.server.time_to_first_token"`,
		"status: traces: " + itoa(treeSpans) + " of " + itoa(treeSpans) + " spans exported to stdout (console); metrics: to stdout (console)"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("stdout lacks %s:\n%.3000s", want, out)
		}
	}
}

func consoleChild(t *testing.T) {
	p, err := Setup(context.Background(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	recordOne(t, p)
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	fmt.Println("status:", p.Status())
}

// TestPrometheusFromEnvironment: OTEL_METRICS_EXPORTER=prometheus serves
// /metrics on OTEL_EXPORTER_PROMETHEUS_HOST:PORT, with the Aggregator's
// histograms and the SDK's instruments; Shutdown stops the server.
func TestPrometheusFromEnvironment(t *testing.T) {
	port := freePort(t)
	cleanEnv(t, "OTEL_METRICS_EXPORTER", "prometheus", "OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1", "OTEL_EXPORTER_PROMETHEUS_PORT", port)
	p, err := Setup(context.Background(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	recordOne(t, p)
	url := "http://127.0.0.1:" + port + "/metrics"
	body := get(t, url)
	for _, want := range []string{"gen_ai_server_time_to_first_token_seconds_count", "target_info"} {
		if !strings.Contains(body, want) {
			t.Errorf("%s lacks %s:\n%.2000s", url, want, body)
		}
	}
	if s := p.Status().String(); !strings.Contains(s, "metrics: served at http://127.0.0.1:"+port+"/metrics (prometheus)") {
		t.Errorf("Status() = %q", s)
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := httpGet(url); err == nil {
		t.Error("the Prometheus server still answers after Shutdown")
	}
}

// TestHistogramAggregation: with
// OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION=base2_exponential_bucket_histogram
// the SDK's histogram instruments reach the receiver as exponential
// histograms and Providers.HistogramAggregation says so; without it they
// keep explicit buckets. A bad value is reported.
func TestHistogramAggregation(t *testing.T) {
	for _, tc := range []struct {
		value       string
		exponential bool
		warned      bool
	}{
		{"", false, false},
		{"explicit_bucket_histogram", false, false},
		{"base2_exponential_bucket_histogram", true, false},
		{"exponential", false, true},
	} {
		t.Run("value="+tc.value, func(t *testing.T) {
			rec := startReceiver(t, receiverOpts{http: true, metrics: true})
			cleanEnv(t, "OTEL_METRICS_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT", rec.Endpoint,
				"OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf",
				"OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION", tc.value)
			errs := captureErrors(t)
			p := setup(t, Config{})
			h, err := p.MeterProvider.Meter("test").Float64Histogram("test.latency")
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range []float64{0.001, 0.5, 33, 2000} {
				h.Record(context.Background(), v)
			}
			if err := p.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			m := rec.metric("test.latency")
			if m == nil {
				t.Fatal("test.latency did not arrive")
			}
			if got := m.GetExponentialHistogram() != nil; got != tc.exponential {
				t.Errorf("exponential %v, want %v: %v", got, tc.exponential, m)
			}
			if got := aggregationIsExponential(p.HistogramAggregation); got != tc.exponential {
				t.Errorf("HistogramAggregation %#v", p.HistogramAggregation)
			}
			if warned := len(errs.all()) > 0; warned != tc.warned {
				t.Errorf("warned %v, want %v: %v", warned, tc.warned, errs.all())
			}
		})
	}
}

// TestTrackerHistogramsExponential: with the exponential aggregation asked
// for, the tracker's own latency histograms (not only the SDK's) reach the
// receiver as exponential histograms: Setup leaves the Aggregator, which
// keeps explicit buckets, out of the tracker's options.
func TestTrackerHistogramsExponential(t *testing.T) {
	for _, exponential := range []bool{false, true} {
		t.Run(fmt.Sprint("exponential=", exponential), func(t *testing.T) {
			rec := startReceiver(t, receiverOpts{http: true, metrics: true})
			value := ""
			if exponential {
				value = "base2_exponential_bucket_histogram"
			}
			cleanEnv(t, "OTEL_METRICS_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT", rec.Endpoint,
				"OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf",
				"OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION", value)
			p := setup(t, Config{})
			if (p.Aggregator == nil) != exponential {
				t.Fatalf("Aggregator %v with exponential=%v", p.Aggregator, exponential)
			}
			tr, err := otelstats.NewTracker(p.TrackerOptions()...)
			if err != nil {
				t.Fatal(err)
			}
			t0 := time.Now()
			q, _ := tr.Arrive(context.Background(), "r", otelstats.Arrival{Time: t0, Model: "m"})
			_ = q.Detokenized(t0.Add(33*time.Second), 1, 0) // past the advice's 10 s top bucket
			_ = q.Finish(t0.Add(34*time.Second), "stop")
			_ = tr.Shutdown(context.Background())
			if err := p.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			m := rec.metric(attributes.MetricTimeToFirstToken)
			if m == nil {
				t.Fatal("the TTFT histogram did not arrive")
			}
			if got := m.GetExponentialHistogram() != nil; got != exponential {
				t.Errorf("exponential %v, want %v: %v", got, exponential, m)
			}
		})
	}
}

// TestSampler: OTEL_TRACES_SAMPLER and its argument decide which traces
// are exported, as the SDK reads them.
func TestSampler(t *testing.T) {
	for _, tc := range []struct {
		sampler, arg string
		want         int
	}{
		{"", "", treeSpans},
		{"always_off", "", 0},
		{"traceidratio", "0", 0},
		{"traceidratio", "1", treeSpans},
		{"parentbased_traceidratio", "0", 0},
		{"parentbased_always_off", "", 0},
		{"TraceIdRatio ", "1", treeSpans}, // read as the SDK reads it
	} {
		t.Run(tc.sampler+"/"+tc.arg, func(t *testing.T) {
			rec := startReceiver(t, receiverOpts{traces: true, metrics: true})
			cleanEnv(t, "OTEL_EXPORTER_OTLP_ENDPOINT", rec.Endpoint, "OTEL_TRACES_SAMPLER", tc.sampler, "OTEL_TRACES_SAMPLER_ARG", tc.arg)
			p := setup(t, Config{})
			recordOne(t, p)
			if err := p.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			if n := rec.spanCount(); n != tc.want {
				t.Errorf("%d spans exported, want %d", n, tc.want)
			}
		})
	}
}

// TestCountsHoldOnEveryPath: produced = exported + dropped once Shutdown
// returned, whatever the exporter did — accepted, refused, hung.
func TestCountsHoldOnEveryPath(t *testing.T) {
	for _, tc := range []struct {
		name     string
		endpoint func(t *testing.T) string
		traces   bool
		allOK    bool
		// within bounds Shutdown: short only where the exporter hangs
		// (a loaded machine must not fail the accepting case).
		within time.Duration
	}{
		{name: "accepting", endpoint: func(t *testing.T) string {
			return startReceiver(t, receiverOpts{traces: true}).Endpoint
		}, allOK: true, within: 30 * time.Second},
		{name: "refusing traces", endpoint: func(t *testing.T) string {
			return startReceiver(t, receiverOpts{metrics: true}).Endpoint
		}, within: 30 * time.Second},
		{name: "hung", endpoint: silentListener, within: 200 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cleanEnv(t, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", tc.endpoint(t),
				"OTEL_BSP_SCHEDULE_DELAY", "10", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4",
				"OTEL_BSP_EXPORT_TIMEOUT", "60000", "OTEL_EXPORTER_OTLP_TIMEOUT", "60000")
			_ = captureErrors(t)
			p := setup(t, Config{})
			tr, err := otelstats.NewTracker(p.TrackerOptions()...)
			if err != nil {
				t.Fatal(err)
			}
			for range 5 {
				request(t, tr)
			}
			_ = tr.Shutdown(context.Background())
			ctx, cancel := context.WithTimeout(context.Background(), tc.within)
			defer cancel()
			_ = p.Shutdown(ctx)
			st := p.Status().Traces
			want := int64(5 * treeSpans)
			if st.Produced != want || st.Produced != st.Exported+st.Dropped {
				t.Errorf("produced %d exported %d dropped %d; want %d = exported + dropped", st.Produced, st.Exported, st.Dropped, want)
			}
			if tc.allOK != (st.Exported == want) {
				t.Errorf("exported %d of %d", st.Exported, want)
			}
		})
	}
}

// TestSetupErrors: a value no exporter can use fails Setup with the
// variable's name, and leaves nothing running.
func TestSetupErrors(t *testing.T) {
	busy := listenBusy(t)
	for _, tc := range []struct {
		name   string
		env    []string
		want   string
		config bool // a ConfigError
	}{
		{"unknown traces exporter", []string{"OTEL_TRACES_EXPORTER", "zipkin"}, "OTEL_TRACES_EXPORTER", true},
		{"unknown metrics exporter", []string{"OTEL_METRICS_EXPORTER", "statsd"}, "OTEL_METRICS_EXPORTER", true},
		{"producers", []string{"OTEL_METRICS_EXPORTER", "otlp", "OTEL_METRICS_PRODUCERS", "prometheus"}, "OTEL_METRICS_PRODUCERS", true},
		{"prometheus port taken", []string{"OTEL_METRICS_EXPORTER", "prometheus", "OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1", "OTEL_EXPORTER_PROMETHEUS_PORT", busy}, busy, false},
		{"bad traces exporter after a good metrics reader", []string{"OTEL_METRICS_EXPORTER", "prometheus", "OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1",
			"OTEL_EXPORTER_PROMETHEUS_PORT", "0", "OTEL_TRACES_EXPORTER", "zipkin"}, "OTEL_TRACES_EXPORTER", true},
		// autoexport matches names exactly: the error says what to write,
		// not that the name it shows is unknown.
		{"exporter name in capitals", []string{"OTEL_TRACES_EXPORTER", "Console"}, `OTEL_TRACES_EXPORTER="Console": write "console"`, true},
		{"exporter name in spaces", []string{"OTEL_METRICS_EXPORTER", " prometheus "}, `OTEL_METRICS_EXPORTER=" prometheus ": write "prometheus"`, true},
		{"bad sampling", []string{EnvSampling, "ratio=2"}, EnvSampling, true},
		{"bad detail", []string{EnvDetail, "9"}, EnvDetail, true},
		{"sampler the Go SDK lacks", []string{"OTEL_TRACES_SAMPLER", "jaeger_remote"}, "OTEL_TRACES_SAMPLER", true},
		{"ratio not a number", []string{"OTEL_TRACES_SAMPLER", "traceidratio", "OTEL_TRACES_SAMPLER_ARG", "0,1"}, "OTEL_TRACES_SAMPLER_ARG", true},
		{"ratio above one", []string{"OTEL_TRACES_SAMPLER", "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG", "10"}, "OTEL_TRACES_SAMPLER_ARG", true},
		// ParseFloat takes it, and no comparison rejects it.
		{"ratio NaN", []string{"OTEL_TRACES_SAMPLER", "traceidratio", "OTEL_TRACES_SAMPLER_ARG", "NaN"}, "OTEL_TRACES_SAMPLER_ARG", true},
		// The exporter would send to its default, localhost:4317 over TLS.
		{"endpoint a bare ip:port", []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "127.0.0.1:4317"}, "OTEL_EXPORTER_OTLP_ENDPOINT", true},
		{"traces endpoint a bare ip:port", []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "10.0.0.1:4318"}, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", true},
		// OTLP/HTTP takes an http(s) URL only: the exporters would read
		// the host name as a scheme and send nowhere.
		{"http/protobuf endpoint host:port", []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf", "OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT", true},
		{"http/protobuf metrics endpoint host:port/path", []string{"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/protobuf", "OTEL_METRICS_EXPORTER", "otlp",
			"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "localhost:4318/v1/metrics"}, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", true},
		{"http/protobuf endpoint another scheme", []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf", "OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://h:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT", true},
		// A port past 65535 (or 0): every export would fail at its dial.
		{"endpoint port out of range", []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:99999"}, "OTEL_EXPORTER_OTLP_ENDPOINT", true},
		{"http/protobuf endpoint port 0", []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://collector:0/v1/traces"}, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", true},
		{"gRPC target port out of range", []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "collector:70000"}, "OTEL_EXPORTER_OTLP_ENDPOINT", true},
		{"endpoint port not a number", []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:43x7"}, "OTEL_EXPORTER_OTLP_ENDPOINT", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cleanEnv(t, tc.env...)
			p, err := Setup(context.Background(), Config{})
			if err == nil {
				_ = p.Shutdown(context.Background())
				t.Fatal("Setup succeeded")
			}
			var ce *ConfigError
			if !strings.Contains(err.Error(), tc.want) || errors.As(err, &ce) != tc.config {
				t.Errorf("error %q: want one naming %s, a ConfigError: %v", err, tc.want, tc.config)
			}
		})
	}
}

// TestTrackerOptions: a tracker built from TrackerOptions sends its spans to
// every processor of the TracerProvider and its latency histograms through
// the Aggregator Setup registered on the Prometheus reader, whatever
// OTEL_TRACES_SAMPLER says: the tracker asks that sampler itself, at
// arrival.
func TestTrackerOptions(t *testing.T) {
	for _, tc := range []struct {
		sampler   string
		wantSpans int
	}{
		{"", treeSpans},
		{"parentbased_always_on", treeSpans},
		{"always_off", 0},
		{"parentbased_traceidratio", treeSpans}, // the argument's default is 1
	} {
		t.Run("sampler="+tc.sampler, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			cleanEnv(t, "OTEL_TRACES_SAMPLER", tc.sampler)
			p := setup(t, Config{ServiceName: "setup-test", SpanProcessors: []sdktrace.SpanProcessor{rec}, Prometheus: true})
			if p.Aggregator == nil {
				t.Fatal("no aggregator")
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
			// SpanExport hands out the same path.
			if sp, res, ok := p.SpanExport(); !ok || sp == nil || res != p.resource {
				t.Errorf("SpanExport: %v, %v, %v; want the processors and resource", sp, res, ok)
			} else if len(ended) > 0 {
				sp.OnEnd(ended[0])
				if n := len(rec.Ended()); n != len(ended)+1 {
					t.Errorf("a span handed to SpanExport's processor: %d spans, want %d", n, len(ended)+1)
				}
			}
			for _, s := range ended {
				if v, _ := s.Resource().Set().Value("service.name"); v.AsString() != "setup-test" {
					t.Errorf("span %s: service.name %q", s.Name(), v.AsString())
				}
			}
			w := httptest.NewRecorder()
			p.MetricsHandler.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
			body, _ := io.ReadAll(w.Result().Body)
			if !strings.Contains(string(body), "gen_ai_server_time_to_first_token_seconds_count") {
				t.Errorf("latency histograms missing from /metrics:\n%.2000s", body)
			}
		})
	}
}

// TestTrackerEnvironment: LLMTRACE_SAMPLING, LLMTRACE_DETAIL and the GenAI
// content variable reach the tracker through TrackerOptions (the library
// reads no environment itself).
func TestTrackerEnvironment(t *testing.T) {
	for _, tc := range []struct {
		name, sampling, detail, content string
		wantSampled                     bool
		wantReason                      string
		wantOpts                        int
		wantWarning                     bool
	}{
		{name: "defaults", wantSampled: true, wantReason: otelstats.SampledAll},
		{name: "policy keeps nothing ordinary", sampling: "errors,ratio=0", wantSampled: false, wantOpts: 1},
		{name: "policy keeps errors", sampling: "errors", wantSampled: false, wantOpts: 1},
		{name: "detail", detail: "0", wantSampled: true, wantOpts: 1},
		{name: "content on", content: "true", wantSampled: true, wantOpts: 1},
		{name: "content off", content: "False", wantSampled: true},
		{name: "content neither true nor false", content: "1", wantSampled: true, wantWarning: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cleanEnv(t, EnvSampling, tc.sampling, EnvDetail, tc.detail, EnvCaptureContent, tc.content)
			errs := captureErrors(t)
			// A processor takes the spans: without one the tracker builds
			// none, and no policy has anything to decide.
			p := setup(t, Config{SpanProcessors: []sdktrace.SpanProcessor{tracetest.NewSpanRecorder()}})
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
			if len(p.tracker) != tc.wantOpts {
				t.Errorf("%d tracker options from the environment, want %d", len(p.tracker), tc.wantOpts)
			}
			if warned := len(errs.all()) > 0; warned != tc.wantWarning {
				t.Errorf("warned %v: %v", warned, errs.all())
			}
		})
	}
}

// treeSpans is how many spans request's tree has (counted, not assumed:
// the tree is the span builder's to decide).
var treeSpans = func() int {
	rec := tracetest.NewSpanRecorder()
	tr, err := otelstats.NewTracker(otelstats.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))))
	if err != nil {
		panic(err)
	}
	request(nil, tr)
	_ = tr.Shutdown(context.Background())
	return len(rec.Ended())
}()

func itoa(n int) string { return fmt.Sprint(n) }

// request records one preempted, streamed request; its tree has treeSpans
// spans. t may be nil: errors then panic.
// recordOne records one request through a tracker on p's providers and
// shuts the tracker down (its spans ended, its metrics recorded); the
// providers stay up for the test to flush or shut.
func recordOne(t *testing.T, p *Providers) {
	t.Helper()
	tr, err := otelstats.NewTracker(p.TrackerOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	request(t, tr)
	_ = tr.Shutdown(context.Background())
}

func request(t *testing.T, tr *otelstats.Tracker) {
	fatal := func(err error) { panic(err) }
	if t != nil {
		t.Helper()
		fatal = func(err error) { t.Helper(); t.Fatal(err) }
	}
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	q, err := tr.Arrive(context.Background(), "r"+t0.Format("150405.000000000"), otelstats.Arrival{Time: at(0), Model: "m"})
	if err != nil {
		fatal(err)
	}
	must := func(err error) {
		if err != nil {
			fatal(err)
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

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// listenBusy holds a port for the test and returns it.
func listenBusy(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

func httpGet(url string) (string, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func get(t *testing.T, url string) string {
	t.Helper()
	body, err := httpGet(url)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

func aggregationIsExponential(a sdkmetric.Aggregation) bool {
	_, ok := a.(sdkmetric.AggregationBase2ExponentialHistogram)
	return ok
}

// TestTracesEndpoint: Config.TracesEndpoint (a command's -endpoint) sends
// traces there over the configured protocol whatever OTEL_TRACES_EXPORTER
// says; NoMetricsExport keeps metrics home.
func TestTracesEndpoint(t *testing.T) {
	for _, proto := range []string{"", "http/protobuf"} {
		t.Run("protocol="+proto, func(t *testing.T) {
			rec := startReceiver(t, receiverOpts{http: proto != "", traces: true, metrics: true})
			cleanEnv(t, "OTEL_TRACES_EXPORTER", "none", "OTEL_METRICS_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", proto)
			ep := strings.TrimPrefix(rec.Endpoint, "http://") // host:port
			p := setup(t, Config{TracesEndpoint: ep, NoMetricsExport: true})
			if !p.TracesExported || p.MetricsExported {
				t.Fatalf("traces %v metrics %v exported", p.TracesExported, p.MetricsExported)
			}
			recordOne(t, p)
			if err := p.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			if n := rec.spanCount(); n != treeSpans {
				t.Errorf("%d spans at the endpoint, want %d", n, treeSpans)
			}
			if rec.metric("gen_ai.server.time_to_first_token") != nil {
				t.Error("metrics were exported with NoMetricsExport")
			}
		})
	}
}

// TestTracesEndpointPort: a Config.TracesEndpoint whose port no dial can
// reach fails Setup, naming it, as the endpoint variables do: taken,
// every export would fail.
func TestTracesEndpointPort(t *testing.T) {
	for _, ep := range []string{"127.0.0.1:99999", "http://collector:0", "https://collector:65536/v1/traces"} {
		t.Run(ep, func(t *testing.T) {
			cleanEnv(t)
			p, err := Setup(context.Background(), Config{TracesEndpoint: ep, NoMetricsExport: true})
			if err == nil {
				_ = p.Shutdown(context.Background())
				t.Fatal("Setup succeeded")
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Name != "Config.TracesEndpoint" {
				t.Errorf("Setup: %v, want a ConfigError naming Config.TracesEndpoint", err)
			}
		})
	}
}

// TestBatchConfig: OTEL_BSP_* reach the batch processor in their units; a
// size that is not a positive integer, or a delay or timeout that is
// negative or not an integer, is reported and the default kept.
func TestBatchConfig(t *testing.T) {
	for _, tc := range []struct {
		env    []string
		want   string
		warned bool
	}{
		{nil, "OTEL_BSP_MAX_QUEUE_SIZE=16384 OTEL_BSP_MAX_EXPORT_BATCH_SIZE=1024 OTEL_BSP_SCHEDULE_DELAY=1000 OTEL_BSP_EXPORT_TIMEOUT=10000", false},
		{[]string{"OTEL_BSP_MAX_QUEUE_SIZE", "64", "OTEL_BSP_SCHEDULE_DELAY", "50", "OTEL_BSP_EXPORT_TIMEOUT", "2500"},
			"OTEL_BSP_MAX_QUEUE_SIZE=64 OTEL_BSP_MAX_EXPORT_BATCH_SIZE=64 OTEL_BSP_SCHEDULE_DELAY=50 OTEL_BSP_EXPORT_TIMEOUT=2500", false},
		{[]string{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "-3", "OTEL_BSP_SCHEDULE_DELAY", "1s"},
			"OTEL_BSP_MAX_QUEUE_SIZE=16384 OTEL_BSP_MAX_EXPORT_BATCH_SIZE=1024 OTEL_BSP_SCHEDULE_DELAY=1000 OTEL_BSP_EXPORT_TIMEOUT=10000", true},
		// The specification's durations: 0 is a value, and a timeout of 0 is none.
		{[]string{"OTEL_BSP_SCHEDULE_DELAY", "0", "OTEL_BSP_EXPORT_TIMEOUT", "0"},
			"OTEL_BSP_MAX_QUEUE_SIZE=16384 OTEL_BSP_MAX_EXPORT_BATCH_SIZE=1024 OTEL_BSP_SCHEDULE_DELAY=0 OTEL_BSP_EXPORT_TIMEOUT=0", false},
		{[]string{"OTEL_BSP_MAX_QUEUE_SIZE", "0", "OTEL_BSP_EXPORT_TIMEOUT", "-1"},
			"OTEL_BSP_MAX_QUEUE_SIZE=16384 OTEL_BSP_MAX_EXPORT_BATCH_SIZE=1024 OTEL_BSP_SCHEDULE_DELAY=1000 OTEL_BSP_EXPORT_TIMEOUT=10000", true},
	} {
		cleanEnv(t, tc.env...)
		errs := captureErrors(t)
		if got := batchConfig().String(); got != tc.want {
			t.Errorf("%v:\n got %s\nwant %s", tc.env, got, tc.want)
		}
		if warned := len(errs.all()) > 0; warned != tc.warned {
			t.Errorf("%v: warned %v: %v", tc.env, warned, errs.all())
		}
	}
}

// TestNoSpansWhereNothingTakesThem: with no trace exporter and no span
// processor (OTEL_TRACES_EXPORTER=none, OTEL_SDK_DISABLED=true) the
// tracker TrackerOptions make builds no spans and says so (traces_off);
// a processor of the caller's gets them as before.
func TestNoSpansWhereNothingTakesThem(t *testing.T) {
	for _, tc := range []struct {
		name  string
		env   []string
		procs bool
		want  string
	}{
		{"traces none", []string{"OTEL_TRACES_EXPORTER", "none", "OTEL_METRICS_EXPORTER", "none"}, false, otelstats.NotTraced},
		{"sdk disabled", []string{"OTEL_SDK_DISABLED", "true"}, false, otelstats.NotTraced},
		{"traces none, a processor", []string{"OTEL_TRACES_EXPORTER", "none", "OTEL_METRICS_EXPORTER", "none"}, true, otelstats.SampledAll},
		{"sdk disabled, a processor", []string{"OTEL_SDK_DISABLED", "true"}, true, otelstats.SampledAll},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cleanEnv(t, tc.env...)
			rec := tracetest.NewSpanRecorder()
			var c Config
			if tc.procs {
				c.SpanProcessors = []sdktrace.SpanProcessor{rec}
			}
			p := setup(t, c)
			var got []otelstats.RequestStats
			tr, err := otelstats.NewTracker(append(p.TrackerOptions(),
				otelstats.WithOnFinish(func(s *otelstats.RequestStats) { got = append(got, *s) }))...)
			if err != nil {
				t.Fatal(err)
			}
			request(t, tr)
			_ = tr.Shutdown(context.Background())
			if len(got) != 1 || got[0].SamplingReason != tc.want || got[0].Sampled != tc.procs || !got[0].FirstTokenLatency.Valid {
				t.Fatalf("stats %+v", got)
			}
			if n := len(rec.Ended()); (n > 0) != tc.procs {
				t.Errorf("%d spans reached the caller's processor", n)
			}
		})
	}
}

// A span carrying a string that is not UTF-8 (a client's header, a body)
// reaches the backend repaired, and the spans batched with it arrive: the
// SDK's exporter fails the whole request for it. With
// OTEL_GO_X_OBSERVABILITY=true the SDK's own exporter is kept.
func TestInvalidUTF8CostsNoBatch(t *testing.T) {
	for _, c := range []struct{ protocol, observability string }{{"", ""}, {"http/protobuf", ""}, {"http/protobuf", "true"}} {
		t.Run("protocol="+c.protocol+",observability="+c.observability, func(t *testing.T) {
			rec := startReceiver(t, receiverOpts{http: c.protocol != "", traces: true})
			cleanEnv(t, "OTEL_EXPORTER_OTLP_ENDPOINT", rec.Endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL", c.protocol,
				"OTEL_METRICS_EXPORTER", "none", "OTEL_GO_X_OBSERVABILITY", c.observability)
			p := setup(t, Config{ServiceName: "svc"})
			tr := p.TracerProvider.Tracer("t")
			names, bad := []string{"ok-1", "bad\xff", "ok-2"}, "\xc0"
			if c.observability != "" {
				names, bad = []string{"ok-1", "ok-2"}, "" // the SDK's exporter would fail them all
			}
			for _, n := range names {
				_, s := tr.Start(context.Background(), n, trace.WithAttributes(attribute.String("user_agent.original", n+bad)))
				s.End()
			}
			if err := p.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			want := strings.ToValidUTF8(strings.Join(names, ","), "\uFFFD")
			rec.mu.Lock()
			got := strings.Join(rec.spans, ",")
			rec.mu.Unlock()
			if got != want {
				t.Errorf("receiver got spans %q, want %q", got, want)
			}
			if st := p.Status().Traces; st.Exported != int64(len(names)) || st.Dropped != 0 {
				t.Errorf("traces status %+v", st)
			}
		})
	}
}

// A malformed OTEL_RESOURCE_ATTRIBUTES (a trailing comma from a template,
// an entry without '=') is reported, naming the variable, and the pairs
// that parsed apply: the SDK's default resource does the same, and the
// service must start.
func TestResourceAttributesPartial(t *testing.T) {
	for _, v := range []string{"deployment.environment.name=prod,", "deployment.environment.name=prod,team", "a=1,,deployment.environment.name=prod"} {
		t.Run(v, func(t *testing.T) {
			cleanEnv(t, "OTEL_RESOURCE_ATTRIBUTES", v, "OTEL_SERVICE_NAME", "svc")
			errs := captureErrors(t)
			p, err := Setup(context.Background(), Config{})
			if err != nil {
				t.Fatalf("Setup: %v", err)
			}
			defer p.Shutdown(context.Background())
			got := map[string]string{}
			for _, kv := range p.resource.Attributes() {
				got[string(kv.Key)] = kv.Value.String()
			}
			if got["deployment.environment.name"] != "prod" || got["service.name"] != "svc" {
				t.Errorf("resource %v", got)
			}
			all := errs.all()
			if len(all) == 0 || !strings.Contains(fmt.Sprint(all), "OTEL_RESOURCE_ATTRIBUTES") {
				t.Errorf("reported %v, want an error naming OTEL_RESOURCE_ATTRIBUTES", all)
			}
		})
	}
}
