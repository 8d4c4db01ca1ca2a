package deploycheck

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.yaml.in/yaml/v3"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/e2e/testbackend"
	"github.com/llmtrace/llmtrace/internal/freeport"
)

// The collector these tests run is built with ocb from
// otelcol/builder-config.yaml. Building takes minutes (about 1m40s on an
// idle 2-core machine, cold module cache excluded), so it only happens when
// asked for:
//
//	LLMTRACE_OTELCOL_BIN=/path/to/otelcol  use this binary
//	LLMTRACE_BUILD_COLLECTOR=1             build it into the cache if missing
//	                                       (the default when CI is set;
//	                                       LLMTRACE_BUILD_COLLECTOR=0 opts out)
//
// testbackend.CollectorBuild does it (the one ocb harness, shared with
// e2e/fleet): the cache is testbackend.CacheDir() (~/.cache/llmtrace, where
// scripts/build-jaeger.sh keeps Jaeger); a binary built once is found there
// again, keyed by the builder config's hash, without either variable.
const builderVersion = "v0.165.0"

var (
	collectorOnce sync.Once
	collectorPath string
	collectorSkip string
	collectorErr  error
)

// collectorBinary finds or (once per test process) builds the collector.
func collectorBinary(t *testing.T) string {
	t.Helper()
	collectorOnce.Do(func() {
		collectorPath, collectorSkip, collectorErr = findOrBuildCollector(repoRoot(t))
	})
	if collectorErr != nil {
		t.Fatal(collectorErr)
	}
	if collectorSkip != "" {
		t.Skip(collectorSkip)
	}
	return collectorPath
}

func findOrBuildCollector(root string) (bin, skip string, err error) {
	return testbackend.CollectorBuild{
		Manifest: filepath.Join(root, builderConfig), BuilderVersion: builderVersion,
		RepoRoot: root, BinEnv: "LLMTRACE_OTELCOL_BIN",
	}.Binary()
}

// TestCollectorValidates runs the real collector's validate command over
// deploy/otel-collector/config.yaml: unknown component types, misspelled
// settings and broken pipelines fail here as they would in the container.
func TestCollectorValidates(t *testing.T) {
	bin := collectorBinary(t)
	out, err := exec.Command(bin, "validate", "--config=file:"+filepath.Join(repoRoot(t), collectorConfig)).CombinedOutput()
	if err != nil {
		t.Fatalf("collector validate: %v\n%s", err, out)
	}
	t.Logf("%s validates %s", filepath.Base(bin), collectorConfig)
}

// ---------------------------------------------------------------------------
// End to end: SDK → OTLP → collector (deploy config) → /metrics → Prometheus
// → every dashboard query.

// e2eInstruments mirrors the instrument table of deploy/deploy_test.go (and
// otelstats): every metric llmtrace emits, with kind, unit and labels.
type e2eInstrument struct {
	name    string
	kind    string // histogram, counter, gauge, intgauge
	unit    string
	buckets []float64
	sets    [][]attribute.KeyValue
}

func e2eInstruments() []e2eInstrument {
	base := []attribute.KeyValue{attributes.OperationName.String("chat"), attributes.RequestModel.String("demo-model")}
	with := func(kv ...attribute.KeyValue) []attribute.KeyValue { return append(slices.Clone(base), kv...) }
	req := [][]attribute.KeyValue{base}
	none := [][]attribute.KeyValue{nil}
	decode := [][]attribute.KeyValue{with(attributes.PDRole.String("decode"))}
	s, tok := attributes.UnitSeconds, attributes.UnitToken
	return []e2eInstrument{
		{attributes.MetricTimeToFirstToken, "histogram", s, attributes.TimeToFirstTokenBuckets(), req},
		{attributes.MetricTimePerOutputToken, "histogram", s, attributes.TimePerOutputTokenBuckets(), req},
		{attributes.MetricRequestDuration, "histogram", s, attributes.RequestDurationBuckets(),
			[][]attribute.KeyValue{base, with(attributes.ErrorType.String("timeout"))}},
		{attributes.MetricInterTokenLatency, "histogram", s, attributes.InterTokenLatencyBuckets(), req},
		{attributes.MetricQueueDuration, "histogram", s, attributes.PhaseDurationBuckets(), req},
		{attributes.MetricPrefillDuration, "histogram", s, attributes.PhaseDurationBuckets(), req},
		{attributes.MetricDecodeDuration, "histogram", s, attributes.PhaseDurationBuckets(), req},
		{attributes.MetricInferenceDuration, "histogram", s, attributes.PhaseDurationBuckets(), req},
		{attributes.MetricRequests, "counter", attributes.UnitRequest, nil,
			[][]attribute.KeyValue{with(attributes.FinishReason.String("stop")), with(attributes.FinishReason.String("length"))}},
		{attributes.MetricPreemptions, "counter", attributes.UnitPreempt, nil, req},
		{attributes.MetricPromptTokens, "counter", tok, nil, req},
		{attributes.MetricGenerationTokens, "counter", tok, nil, req},
		{attributes.MetricPrefixCacheQuery, "counter", tok, nil, [][]attribute.KeyValue{base, nil}},
		{attributes.MetricPrefixCacheHits, "counter", tok, nil, [][]attribute.KeyValue{base, nil}},
		{attributes.MetricRequestsRunning, "intgauge", attributes.UnitRequest, nil, none},
		{attributes.MetricRequestsWaiting, "intgauge", attributes.UnitRequest, nil, none},
		{attributes.MetricKVCacheUsage, "gauge", attributes.UnitRatio, nil, none},
		{attributes.MetricRejectedUpdates, "counter", attributes.UnitUpdate, nil,
			[][]attribute.KeyValue{{attributes.RejectionReason.String("unknown_request")}}},
		{attributes.MetricSpansDropped, "counter", attributes.UnitSpan, nil, none},
		{attributes.MetricSpansClamped, "counter", attributes.UnitSpan, nil, none},
		{attributes.MetricRequestsEvicted, "counter", attributes.UnitRequest, nil, none},
		{attributes.MetricAttributesTruncated, "counter", "{attribute}", nil,
			[][]attribute.KeyValue{{attributes.TruncatedKey.String(string(attributes.RequestModel))}}},
		{attributes.MetricKVTransferDuration, "histogram", s, attributes.PhaseDurationBuckets(), decode},
		{attributes.MetricKVTransferTokens, "counter", tok, nil, decode},
		{attributes.MetricKVTransferBytes, "counter", attributes.UnitByte, nil, decode},
		{attributes.MetricKVTransferFailures, "counter", attributes.UnitTransfer, nil, decode},
		{attributes.MetricSpecDraftTokens, "counter", tok, nil, req},
		{attributes.MetricSpecAcceptedTokens, "counter", tok, nil, req},
		{attributes.MetricSpecSteps, "counter", attributes.UnitStep, nil, req},
		{attributes.MetricSpecAcceptedPerPosition, "counter", tok, nil,
			[][]attribute.KeyValue{with(attributes.SpecPosition.Int(0)), with(attributes.SpecPosition.Int(1))}},
		{attributes.MetricSpecAcceptanceRate, "histogram", attributes.UnitRatio, attributes.AcceptanceRateBuckets(), req},
		{attributes.MetricEncodeDuration, "histogram", s, attributes.PhaseDurationBuckets(), req},
	}
}

// recorder records every instrument once per call, histograms inside a
// sampled span context so the SDK attaches exemplars.
type recorder func(ctx context.Context, i int)

func newRecorder(t *testing.T, m metric.Meter) recorder {
	t.Helper()
	var fns []func(context.Context, int)
	for _, in := range e2eInstruments() {
		opts := make([]metric.MeasurementOption, len(in.sets))
		for i, kv := range in.sets {
			opts[i] = metric.WithAttributeSet(attribute.NewSet(kv...))
		}
		var f func(context.Context, int)
		var err error
		switch in.kind {
		case "histogram":
			var h metric.Float64Histogram
			h, err = m.Float64Histogram(in.name, metric.WithUnit(in.unit), metric.WithExplicitBucketBoundaries(in.buckets...))
			f = func(ctx context.Context, i int) {
				for _, o := range opts {
					h.Record(ctx, 0.003*float64(1+i%50), o)
				}
			}
		case "counter":
			var c metric.Int64Counter
			c, err = m.Int64Counter(in.name, metric.WithUnit(in.unit))
			f = func(ctx context.Context, i int) {
				for _, o := range opts {
					c.Add(ctx, int64(1+i%3), o)
				}
			}
		case "gauge":
			var g metric.Float64Gauge
			g, err = m.Float64Gauge(in.name, metric.WithUnit(in.unit))
			f = func(ctx context.Context, i int) {
				for _, o := range opts {
					g.Record(ctx, float64(i%10)/10, o)
				}
			}
		case "intgauge":
			var g metric.Int64Gauge
			g, err = m.Int64Gauge(in.name, metric.WithUnit(in.unit))
			f = func(ctx context.Context, i int) {
				for _, o := range opts {
					g.Record(ctx, int64(i%7), o)
				}
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		fns = append(fns, f)
	}
	return func(ctx context.Context, i int) {
		for _, f := range fns {
			f(ctx, i)
		}
	}
}

// goExporterSeries is what the Go SDK's own Prometheus exporter exposes for
// the same instruments: the names the dashboard is written against.
func goExporterSeries(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	defer mp.Shutdown(context.Background())
	newRecorder(t, mp.Meter("github.com/llmtrace/llmtrace"))(context.Background(), 1)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, mf := range mfs {
		if mf.GetType().String() == "HISTOGRAM" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				out[mf.GetName()+s] = true
			}
			continue
		}
		out[mf.GetName()] = true
	}
	return out
}

// logBuffer collects a child process' output for failure messages.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// start runs a child process until the test ends.
func start(t *testing.T, name string, args ...string) *logBuffer {
	t.Helper()
	logs := &logBuffer{}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s output:\n%s", filepath.Base(name), logs.String())
		}
	})
	return logs
}

func waitHTTP(t *testing.T, what, u string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		resp, err := http.Get(u)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready at %s after %s (last error %v)", what, u, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// collectorTestConfig is deploy/otel-collector/config.yaml with every
// listener moved to a free loopback port, the Jaeger exporter sent to
// jaegerEndpoint (a closed port when empty), and the collector's own
// telemetry off.
func collectorTestConfig(t *testing.T, jaegerEndpoint string) (path string, grpcPort, promPort, healthPort int) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), collectorConfig))
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	get := func(path ...string) map[string]any {
		m := c
		for _, p := range path {
			next, ok := m[p].(map[string]any)
			if !ok {
				t.Fatalf("collector config has no %s", strings.Join(path, "."))
			}
			m = next
		}
		return m
	}
	ports := freeport.Ports(t, 5)
	grpcPort, promPort, healthPort = ports[0], ports[1], ports[2]
	get("receivers", "otlp", "protocols", "grpc")["endpoint"] = fmt.Sprintf("127.0.0.1:%d", grpcPort)
	get("receivers", "otlp", "protocols", "http")["endpoint"] = fmt.Sprintf("127.0.0.1:%d", ports[3])
	get("exporters", "prometheus")["endpoint"] = fmt.Sprintf("127.0.0.1:%d", promPort)
	if jaegerEndpoint == "" {
		jaegerEndpoint = fmt.Sprintf("127.0.0.1:%d", ports[4])
	}
	get("exporters", "otlp_grpc/jaeger")["endpoint"] = jaegerEndpoint
	get("extensions", "health_check")["endpoint"] = fmt.Sprintf("127.0.0.1:%d", healthPort)
	get("service")["telemetry"] = map[string]any{"metrics": map[string]any{"level": "none"}}
	out, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(t.TempDir(), "otelcol.yaml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, grpcPort, promPort, healthPort
}

var (
	reSample   = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s`)
	reExemplar = regexp.MustCompile(`#\s*\{[^}]*trace_id="([0-9a-f]{32})"`)
	reLabel    = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="`)
)

type scrape struct {
	series    map[string]map[string]bool // name → label names
	exemplars map[string]bool            // trace ids
	jobs      map[string]bool            // job label values of target_info
}

func scrapeOpenMetrics(t *testing.T, u string) scrape {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	s := scrape{series: map[string]map[string]bool{}, exemplars: map[string]bool{}, jobs: map[string]bool{}}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		m := reSample.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		labels := s.series[m[1]]
		if labels == nil {
			labels = map[string]bool{}
			s.series[m[1]] = labels
		}
		for _, l := range reLabel.FindAllStringSubmatch(m[2], -1) {
			labels[l[1]] = true
		}
		if m[1] == "target_info" {
			if j := regexp.MustCompile(`job="([^"]*)"`).FindStringSubmatch(m[2]); j != nil {
				s.jobs[j[1]] = true
			}
		}
		if e := reExemplar.FindStringSubmatch(line); e != nil {
			s.exemplars[e[1]] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestCollectorEndToEnd runs the real collector with the deploy config,
// pushes every llmtrace metric to it over OTLP exactly as the SDK in an
// instrumented program does, and checks what comes out:
//
//   - the collector's prometheus exporter renders the same series names as
//     the Go SDK's Prometheus exporter (the names deploy/deploy_test.go
//     checks the dashboard against), and every series the dashboard queries
//     is there;
//   - histogram exemplars carry the trace id of the span the measurement was
//     made in (what Grafana's exemplar link to Jaeger needs);
//   - target_info carries job = service.name (the dashboard's service
//     variable);
//   - when Debian's prometheus binary is installed: a Prometheus with
//     deploy/prometheus/prometheus.yml scrapes the collector, every
//     dashboard expression returns data, the template variables list the
//     service and the model, and the exemplars are queryable.
func TestCollectorEndToEnd(t *testing.T) {
	bin := collectorBinary(t)
	cfg, grpcPort, promPort, healthPort := collectorTestConfig(t, "")
	start(t, bin, "--config=file:"+cfg)
	waitHTTP(t, "collector", fmt.Sprintf("http://127.0.0.1:%d/", healthPort), 30*time.Second)

	const service = "deploycheck-e2e"
	ctx := context.Background()
	exp, err := otlpmetricgrpc.New(ctx, otlpmetricgrpc.WithEndpoint(fmt.Sprintf("127.0.0.1:%d", grpcPort)), otlpmetricgrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", service), attribute.String("service.instance.id", "e2e-1"))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithResource(res),
		sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(250*time.Millisecond))))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	record := newRecorder(t, mp.Meter("github.com/llmtrace/llmtrace"))

	traceID := trace.TraceID{0x4c, 0x4c, 0x4d, 0x74, 0x72, 0x61, 0x63, 0x65, 1, 2, 3, 4, 5, 6, 7, 8}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID, SpanID: trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8}, TraceFlags: trace.FlagsSampled})
	spanCtx := trace.ContextWithSpanContext(ctx, sc)

	// Keep a steady trickle of measurements going, like a serving engine.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			record(spanCtx, i)
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	record(spanCtx, 0)
	if err := mp.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}

	want := goExporterSeries(t)
	metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", promPort)
	var got scrape
	deadline := time.Now().Add(20 * time.Second)
	for {
		got = scrapeOpenMetrics(t, metricsURL)
		missing := 0
		for name := range want {
			if got.series[name] == nil {
				missing++
			}
		}
		if missing == 0 && len(got.exemplars) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for name := range want {
		if got.series[name] == nil {
			t.Errorf("the Go exporter produces %s, the collector does not", name)
		}
	}
	var extra []string
	for name := range got.series {
		if !want[name] {
			extra = append(extra, name)
		}
	}
	sort.Strings(extra)
	if len(extra) > 0 {
		t.Errorf("the collector produces series the Go exporter does not: %v", extra)
	}
	if !got.exemplars[traceID.String()] {
		t.Errorf("no exemplar with trace_id %s in the collector's OpenMetrics output (exemplars: %v)", traceID, keys(got.exemplars))
	}
	if !got.jobs[service] {
		t.Errorf("target_info has no job=%q (jobs: %v)", service, keys(got.jobs))
	}
	for _, l := range []string{"job", "instance", "gen_ai_operation_name", "gen_ai_request_model"} {
		if !got.series["gen_ai_server_request_duration_seconds_count"][l] {
			t.Errorf("gen_ai_server_request_duration_seconds_count has no %s label", l)
		}
	}
	d := loadGrafanaDashboard(t, filepath.Join(repoRoot(t), dashboardFile))
	exprs := d.promQueries()
	for _, q := range exprs {
		for _, name := range seriesNames(q.expr) {
			if got.series[name] == nil {
				t.Errorf("%s: %s is not in the collector's output", q.where, name)
			}
		}
	}
	if t.Failed() {
		return
	}
	t.Logf("collector renders %d series names, identical to the Go exporter's; exemplar trace_id %s present", len(got.series), traceID)

	promBin, err := testbackend.PrometheusBin()
	if err != nil {
		if os.Getenv(testbackend.EnvCI) != "" {
			t.Fatalf("no prometheus and CI is set: %v", err)
		}
		t.Logf("no prometheus (%v; apt-get install -y --no-install-recommends prometheus): skipping the query stage", err)
		return
	}
	promTarget := fmt.Sprintf("127.0.0.1:%d", promPort)
	promURL := startPrometheus(t, promBin, promTarget, "")

	// The variables find the service (from job: this resource has no
	// service_name on target_info) and the model, and every panel query
	// returns at least one real number.
	if _, err := promWaitValue(t, promURL, `llm_server_requests_total`, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	vs, err := resolveVariables(t, promURL, d, map[string]string{"service": service})
	if err != nil {
		t.Fatal(err)
	}
	if m := vs.options["model"]; !slices.Contains(m, "demo-model") {
		t.Errorf("the model variable offers %q, want demo-model among them", m)
	}
	for _, q := range waitForData(t, promURL, vs, exprs, 45*time.Second) {
		t.Error(q)
	}
	// The vLLM rules give the model-less series (engine gauges, the
	// scheduler's prefix-cache counters) the model their instance served.
	for _, q := range []string{
		`vllm:num_requests_running{model_name="demo-model", engine="0"}`,
		`vllm:kv_cache_usage_perc{model_name="demo-model"}`,
		`vllm:prefix_cache_queries_total{model_name="demo-model", gen_ai_request_model=""}`,
		`vllm:prefix_cache_queries_total{model_name="demo-model", gen_ai_request_model="demo-model"}`,
	} {
		if _, err := promWaitValue(t, promURL, q, 15*time.Second); err != nil {
			t.Error(err)
		}
	}
	// The exemplar made it through Prometheus, under the label Grafana's
	// exemplarTraceIdDestinations looks for.
	if !promHasExemplar(t, promURL, "gen_ai_server_time_to_first_token_seconds_bucket", traceID.String()) {
		t.Errorf("Prometheus stored no exemplar with trace_id=%s", traceID)
	}
	if !t.Failed() {
		t.Logf("Prometheus answers all %d dashboard expressions with data; variables and exemplars check out", len(exprs))
	}
}

// startPrometheus runs Prometheus with deploy/prometheus/prometheus.yml and
// its rule files, the scrape and rule-evaluation intervals cut to 1s, and
// its otel-collector target moved to target. With a job name, the scrape
// is made a direct one, as a user scraping a program's own /metrics writes
// it: that job name, and labels from the scrape (honor_labels off).
func startPrometheus(t *testing.T, bin, target, job string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), prometheusConfig))
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	c["global"].(map[string]any)["scrape_interval"] = "1s"
	c["global"].(map[string]any)["evaluation_interval"] = "1s"
	replaced := 0
	for _, sc := range c["scrape_configs"].([]any) {
		if job != "" {
			sc.(map[string]any)["job_name"] = job
			sc.(map[string]any)["honor_labels"] = false
		}
		for _, st := range sc.(map[string]any)["static_configs"].([]any) {
			targets := st.(map[string]any)["targets"].([]any)
			for i, tg := range targets {
				if strings.HasPrefix(tg.(string), "otel-collector:") {
					targets[i] = target
					replaced++
				}
			}
		}
	}
	if replaced != 1 {
		t.Fatalf("expected one otel-collector target in %s, found %d", prometheusConfig, replaced)
	}
	out, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, out, 0o644); err != nil {
		t.Fatal(err)
	}
	// Rule files are relative to the config's directory: copy them beside it.
	rules, _ := c["rule_files"].([]any)
	for _, r := range rules {
		rel, _ := r.(string)
		if rel == "" || filepath.IsAbs(rel) || strings.Contains(rel, "..") {
			t.Fatalf("%s: rule file %q must be a plain path beside the config", prometheusConfig, r)
		}
		b, err := os.ReadFile(filepath.Join(repoRoot(t), filepath.Dir(prometheusConfig), rel))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, rel), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	addr := freeport.Addr(t)
	start(t, bin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--enable-feature=exemplar-storage", "--log.level=warn")
	u := "http://" + addr
	waitHTTP(t, "prometheus", u+"/-/ready", 30*time.Second)
	return u
}

func promGet(t *testing.T, u string, v any) error {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, b)
	}
	return json.Unmarshal(b, v)
}

// promHasValue reports whether an instant query returns at least one
// sample that is a number (not NaN), and if not, why.
func promHasValue(t *testing.T, base, expr string) (bool, string) {
	t.Helper()
	samples, err := promInstant(t, base, expr)
	if err != nil {
		return false, err.Error()
	}
	for _, s := range samples {
		if f, err := strconv.ParseFloat(s.value, 64); err == nil && !math.IsNaN(f) {
			return true, ""
		}
	}
	return false, fmt.Sprintf("%d series, none with a number", len(samples))
}

func promHasExemplar(t *testing.T, base, series, traceID string) bool {
	t.Helper()
	now := time.Now()
	q := url.Values{"query": {series}, "start": {strconv.FormatInt(now.Add(-10*time.Minute).Unix(), 10)}, "end": {strconv.FormatInt(now.Add(time.Minute).Unix(), 10)}}
	deadline := now.Add(15 * time.Second)
	for {
		var r struct {
			Data []struct {
				Exemplars []struct {
					Labels map[string]string `json:"labels"`
				} `json:"exemplars"`
			} `json:"data"`
		}
		if err := promGet(t, base+"/api/v1/query_exemplars?"+q.Encode(), &r); err != nil {
			t.Errorf("query_exemplars: %v", err)
			return false
		}
		for _, d := range r.Data {
			for _, e := range d.Exemplars {
				if e.Labels["trace_id"] == traceID {
					return true
				}
			}
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestCollectorForwardsTracesToJaeger sends a two-span trace through the
// collector with the deploy config's traces pipeline and exporter settings
// (OTLP gRPC, plaintext) to a real Jaeger v2 — the build of the version the
// compose file's image pins — and reads it back from Jaeger's query API.
func TestCollectorForwardsTracesToJaeger(t *testing.T) {
	bin := collectorBinary(t)
	j := testbackend.StartJaeger(t)
	cfg, grpcPort, _, healthPort := collectorTestConfig(t, j.OTLPGRPCEndpoint())
	start(t, bin, "--config=file:"+cfg)
	waitHTTP(t, "collector", fmt.Sprintf("http://127.0.0.1:%d/", healthPort), 30*time.Second)

	ctx := context.Background()
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(fmt.Sprintf("127.0.0.1:%d", grpcPort)), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	const service = "deploycheck-traces"
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", service))))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tracer := tp.Tracer("github.com/llmtrace/llmtrace/e2e/deploycheck")
	rootName := attributes.RootSpanName("chat", "demo-model")
	rctx, root := tracer.Start(ctx, rootName)
	_, child := tracer.Start(rctx, attributes.SpanPrefill)
	child.End()
	root.End()
	if err := tp.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := j.WaitTrace(ctx, root.SpanContext().TraceID().String(), 2)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	for _, s := range got.Spans {
		names[s.Name] = s.ServiceName
	}
	if names[rootName] != service || names[attributes.SpanPrefill] != service {
		t.Errorf("Jaeger holds spans %v, want %q and %q of service %q", names, rootName, attributes.SpanPrefill, service)
	}
	t.Logf("trace %s went app → collector → Jaeger with %d spans", got.TraceID, len(got.Spans))
}
