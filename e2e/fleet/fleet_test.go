package fleet

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/e2e/testbackend"
	"github.com/llmtrace/llmtrace/examples/simengine/waterfall"
	"github.com/llmtrace/llmtrace/internal/freeport"
	"github.com/llmtrace/llmtrace/otelstats"
	"github.com/llmtrace/llmtrace/reconstruct"
	"github.com/llmtrace/llmtrace/spans"
)

// The fleet policy the test runs deploy/fleet/tier2.yaml with.
const (
	slowTTFT      = 1500 * time.Millisecond
	samplePercent = 25.0
	// The offered load (about 6.75 spans a request, rebuilt children
	// included); LLMTRACE_FLEET_REQUESTS and LLMTRACE_FLEET_RPS override it
	// to measure the sustained rate (BENCHMARKS.md).
	fleetRequests   = 240
	requestsPerSec  = 120
	decisionWait    = 2 * time.Second
	metricsInterval = time.Second
)

// witness is an OTLP gRPC server standing in as an extra exporter of one
// tier-2 collector: it records which trace ids and how many spans that
// instance received after the llmtrace processor.
type witness struct {
	ptraceotlp.UnimplementedGRPCServer
	addr string
	mu   sync.Mutex
	// spans per trace id
	traces map[string]int
	total  int
}

func (w *witness) Export(_ context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	td := req.Traces()
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := 0; i < td.ResourceSpans().Len(); i++ {
		sss := td.ResourceSpans().At(i).ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			sps := sss.At(j).Spans()
			for k := 0; k < sps.Len(); k++ {
				w.traces[sps.At(k).TraceID().String()]++
				w.total++
			}
		}
	}
	return ptraceotlp.NewExportResponse(), nil
}

func (w *witness) snapshot() (map[string]int, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := make(map[string]int, len(w.traces))
	for k, v := range w.traces {
		m[k] = v
	}
	return m, w.total
}

func startWitness(t *testing.T) *witness {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w := &witness{addr: l.Addr().String(), traces: map[string]int{}}
	s := grpc.NewServer()
	ptraceotlp.RegisterGRPCServer(s, w)
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return w
}

// scrapeSum adds up every sample of metric (any labels, with or without a
// _total suffix) in a Prometheus text exposition.
func scrapeSum(t *testing.T, u, metric string) float64 {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Logf("scrape %s: %v", u, err)
		return 0
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0
	}
	var sum float64
	for _, line := range strings.Split(string(b), "\n") {
		name, rest, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexByte(name, '{'); i >= 0 {
			if j := strings.LastIndexByte(line, '}'); j > i {
				name, rest = line[:i], strings.TrimSpace(line[j+1:])
			}
		}
		if name != metric && name != metric+"_total" {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(fields[0], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// startCollector runs the distribution with deploy/fleet/<recipe> and, for
// the witness, an overlay config merged over it (the recipe itself is
// used unchanged), with env for every address.
func startCollector(t *testing.T, bin, name, recipe string, overlay string, env map[string]string) {
	t.Helper()
	args := []string{"--config=file:" + filepath.Join("..", "..", "deploy", "fleet", recipe)}
	if overlay != "" {
		p := filepath.Join(t.TempDir(), name+"-overlay.yaml")
		if err := os.WriteFile(p, []byte(overlay), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config=file:"+p)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	logPath := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		f.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("%s log:\n%s", name, tail(string(b), 4000))
		}
	})
	waitOK(t, name, "http://"+env[healthVar(recipe)]+"/", 60*time.Second)
}

func healthVar(recipe string) string {
	if recipe == "tier1.yaml" {
		return "TIER1_HEALTH_ENDPOINT"
	}
	return "TIER2_HEALTH_ENDPOINT"
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func waitOK(t *testing.T, what, u string, timeout time.Duration) {
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
			t.Fatalf("%s not healthy at %s after %s: %v", what, u, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func addr(p int) string { return "127.0.0.1:" + strconv.Itoa(p) }

// request is one request's ground truth.
type request struct {
	traceID string
	engine  string // service.name
	spans   int    // spans the trace must have in Jaeger and at its tier-2
	keep    bool
	// values recorded by the metrics, seconds; NaN when absent
	ttft, tpot, e2e, queue, prefill, decode, inference float64
	reason                                             string
	prompt, output, preemptions                        int
}

// probabilistic is tail_sampling's probabilistic policy (v0.161.0): FNV-1a
// over the default salt and the trace id, against ratio × MaxUint64.
func probabilistic(traceID trace.TraceID, percent float64) bool {
	h := fnv.New64a()
	_, _ = h.Write([]byte("default-hash-seed"))
	_, _ = h.Write(traceID[:])
	boundary := new(big.Float).SetInt(new(big.Int).SetUint64(math.MaxUint64))
	threshold, _ := boundary.Mul(boundary, big.NewFloat(percent/100)).Uint64()
	return h.Sum64() <= threshold
}

// provider is a TracerProvider exporting OTLP gRPC to tier 1 and recording
// every span it ends (the ground truth of what was sent).
type provider struct {
	tp  *sdktrace.TracerProvider
	rec *tracetest.SpanRecorder
}

func newProvider(t *testing.T, endpoint, service string) *provider {
	t.Helper()
	exp, err := otlptracegrpc.New(context.Background(), otlptracegrpc.WithEndpoint(endpoint), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, sdktrace.WithMaxQueueSize(100000), sdktrace.WithBatchTimeout(100*time.Millisecond)),
		sdktrace.WithSpanProcessor(rec), sdktrace.WithIDGenerator(spans.IDGenerator()),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", service), attribute.String("service.instance.id", service+"-0"))))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return &provider{tp, rec}
}

func spansPerTrace(rec *tracetest.SpanRecorder) map[string]int {
	m := map[string]int{}
	for _, s := range rec.Ended() {
		m[s.SpanContext().TraceID().String()]++
	}
	return m
}

// TestFleetLive runs deploy/fleet for real on loopback: one tier-1 and two
// tier-2 collectors of the llmtrace distribution, real Jaeger and
// Prometheus, two llmtrace Trackers and one engine emitting vLLM-shaped
// llm_request spans under load, each request below a router span. It
// checks that every trace's spans reach exactly one tier-2 collector, that
// the traces Jaeger keeps are exactly those the sampling policy selects
// (complete), that no span is lost, and that the derived metrics in
// Prometheus equal the engines' ground truth.
func TestFleetLive(t *testing.T) {
	bin := collectorBinary(t)
	jaeger := testbackend.StartJaeger(t)

	type tier2 struct {
		w                             *witness
		otlp, prom, health, telemetry string
	}
	var t2 []tier2
	for _, name := range []string{"tier2-a", "tier2-b"} {
		p := freeport.Ports(t, 4)
		tport := p[0]
		c := tier2{w: startWitness(t), otlp: addr(p[1]), prom: addr(p[2]), health: addr(p[3]), telemetry: addr(tport)}
		overlay := fmt.Sprintf(`exporters:
  otlp_grpc/witness:
    endpoint: %s
    tls:
      insecure: true
service:
  pipelines:
    traces/in:
      exporters: [llmtrace_metrics, forward/sample, otlp_grpc/witness]
`, c.w.addr)
		startCollector(t, bin, name, "tier2.yaml", overlay, map[string]string{
			"TIER2_OTLP_GRPC_ENDPOINT": c.otlp, "TIER2_HEALTH_ENDPOINT": c.health,
			"TIER2_PROMETHEUS_ENDPOINT": c.prom, "TIER2_TELEMETRY_PORT": strconv.Itoa(tport),
			"JAEGER_OTLP_ENDPOINT": jaeger.OTLPGRPCEndpoint(), "SLOW_TTFT_SECONDS": strconv.FormatFloat(slowTTFT.Seconds(), 'f', -1, 64),
			"SAMPLE_PERCENTAGE": strconv.FormatFloat(samplePercent, 'f', -1, 64), "TAIL_DECISION_WAIT": decisionWait.String(),
			"METRICS_FLUSH_INTERVAL": metricsInterval.String(),
		})
		t2 = append(t2, c)
	}
	// On failure, what the tier-2 collectors say of their own losses.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for i, c := range t2 {
			for _, m := range []string{"otelcol_exporter_sent_spans", "otelcol_exporter_send_failed_spans", "otelcol_exporter_enqueue_failed_spans",
				"otelcol_processor_tail_sampling_global_count_traces_sampled", "otelcol_processor_tail_sampling_sampling_trace_dropped_too_early",
				"otelcol_processor_tail_sampling_sampling_traces_on_memory", "otelcol_receiver_refused_spans"} {
				t.Logf("tier-2 %d: %s = %v", i, m, scrapeSum(t, "http://"+c.telemetry+"/metrics", m))
			}
		}
	})
	p := freeport.Ports(t, 4)
	tier1 := addr(p[0])
	startCollector(t, bin, "tier1", "tier1.yaml", "", map[string]string{
		"TIER1_OTLP_GRPC_ENDPOINT": tier1, "TIER1_OTLP_HTTP_ENDPOINT": addr(p[1]),
		"TIER1_HEALTH_ENDPOINT": addr(p[2]), "TIER1_TELEMETRY_PORT": strconv.Itoa(p[3]),
		"TIER2_ENDPOINTS": "[" + t2[0].otlp + "," + t2[1].otlp + "]",
	})
	prom := testbackend.StartPrometheus(t, []string{t2[0].prom, t2[1].prom}, 500*time.Millisecond)

	reqs, sendStart := driveFleet(t, tier1)
	byTrace := map[string]*request{}
	totalSpans := 0
	for _, r := range reqs {
		byTrace[r.traceID] = r
		totalSpans += r.spans
	}

	// 1. Every span reaches one tier-2 collector, every trace exactly one.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for {
		n := 0
		for _, c := range t2 {
			_, total := c.w.snapshot()
			n += total
		}
		if n >= totalSpans || ctx.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	delivered := time.Since(sendStart)
	t.Logf("tier 2 had all %d spans %s after the first was sent: %.0f spans/s through tier 1 and the llmtrace processor",
		totalSpans, delivered.Round(time.Millisecond), float64(totalSpans)/delivered.Seconds())
	seen := map[string]int{}
	for i, c := range t2 {
		got, total := c.w.snapshot()
		if len(got) == 0 {
			t.Errorf("tier-2 collector %d received no trace: routing did not spread", i)
		}
		t.Logf("tier-2 collector %d received %d traces, %d spans", i, len(got), total)
		for id, n := range got {
			seen[id]++
			if r := byTrace[id]; r == nil {
				t.Errorf("tier-2 %d received unknown trace %s", i, id)
			} else if n != r.spans {
				t.Errorf("trace %s: tier-2 %d received %d spans, want %d", id, i, n, r.spans)
			}
		}
	}
	for id := range byTrace {
		if seen[id] != 1 {
			t.Errorf("trace %s reached %d tier-2 collectors, want exactly 1", id, seen[id])
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// 2. Jaeger holds exactly the kept traces, complete.
	kept := 0
	for _, r := range reqs {
		if !r.keep {
			continue
		}
		kept++
		tr, err := jaeger.WaitTrace(ctx, r.traceID, r.spans)
		if err != nil {
			t.Fatalf("kept trace %s (%s): %v", r.traceID, r.engine, err)
		}
		if len(tr.Spans) != r.spans {
			t.Errorf("kept trace %s has %d spans in Jaeger, want %d", r.traceID, len(tr.Spans), r.spans)
		}
	}
	// The dropped traces must be absent, not merely late: wait until both
	// tail samplers report a decision for every trace (their own
	// telemetry), then look.
	var decided, early float64
	for {
		decided, early = 0, 0
		for _, c := range t2 {
			decided += scrapeSum(t, "http://"+c.telemetry+"/metrics", "otelcol_processor_tail_sampling_global_count_traces_sampled")
			early += scrapeSum(t, "http://"+c.telemetry+"/metrics", "otelcol_processor_tail_sampling_sampling_trace_dropped_too_early")
		}
		if decided >= float64(len(reqs)) || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if decided != float64(len(reqs)) || early != 0 {
		t.Fatalf("tail sampling decided %v traces (%v dropped too early), want %d decided", decided, early, len(reqs))
	}
	// A decision reaches Jaeger through a batch and Jaeger's own batching:
	// every kept trace is already complete there (checked above), so a
	// dropped one present now would have been exported.
	dropped := 0
	for _, r := range reqs {
		if r.keep {
			continue
		}
		dropped++
		if tr, err := jaeger.GetTrace(ctx, r.traceID); err == nil {
			t.Errorf("trace %s (%s, reason %s, ttft %.3f) is in Jaeger with %d spans; the policy drops it", r.traceID, r.engine, r.reason, r.ttft, len(tr.Spans))
		} else if err != testbackend.ErrTraceNotFound && !strings.Contains(err.Error(), "not found") {
			t.Errorf("trace %s: %v", r.traceID, err)
		}
	}
	t.Logf("%d requests, %d spans: Jaeger keeps %d traces (policy), drops %d", len(reqs), totalSpans, kept, dropped)

	// 3. The derived metrics equal the ground truth.
	checkMetrics(t, ctx, prom, reqs)

	// 4. A reconstructed vLLM waterfall, read back from Jaeger.
	for _, r := range reqs {
		if r.keep && r.engine == "vllm-c" && !math.IsNaN(r.ttft) {
			tr, err := jaeger.GetTrace(ctx, r.traceID)
			if err != nil {
				t.Fatal(err)
			}
			text := renderWaterfall(t, tr)
			t.Logf("reconstructed vLLM trace %s from Jaeger:\n%s", r.traceID, text)
			if p := os.Getenv("LLMTRACE_FLEET_WATERFALL"); p != "" {
				if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if !strings.Contains(text, attributes.SpanPrefill) || !strings.Contains(text, attributes.SpanQueue) {
				t.Errorf("the waterfall lacks the rebuilt children:\n%s", text)
			}
			break
		}
	}
}

// driveFleet sends fleetRequests requests at requestsPerSec through a
// router to three engines and returns their ground truth.
func driveFleet(t *testing.T, tier1 string) ([]*request, time.Time) {
	t.Helper()
	router := newProvider(t, tier1, "router")
	vllm := newProvider(t, tier1, "vllm-c")
	type engine struct {
		name string
		p    *provider
		tr   *otelstats.Tracker
	}
	stats := map[string]*otelstats.RequestStats{}
	var mu sync.Mutex
	policy := &otelstats.SamplingPolicy{KeepErrors: true, KeepPreempted: true, TTFTAbove: slowTTFT, Ratio: 1}
	var engines []engine
	for _, name := range []string{"engine-a", "engine-b"} {
		p := newProvider(t, tier1, name)
		tr, err := otelstats.NewTracker(otelstats.WithTracerProvider(p.tp), otelstats.WithMeterProvider(noop.NewMeterProvider()),
			otelstats.WithSampling(policy), otelstats.WithOnFinish(func(s *otelstats.RequestStats) {
				mu.Lock()
				defer mu.Unlock()
				c := *s
				stats[s.RequestID] = &c
			}))
		if err != nil {
			t.Fatal(err)
		}
		engines = append(engines, engine{name, p, tr})
	}

	var reqs []*request
	n, rps := envInt(t, "LLMTRACE_FLEET_REQUESTS", fleetRequests), envInt(t, "LLMTRACE_FLEET_RPS", requestsPerSec)
	tick := time.NewTicker(time.Second / time.Duration(rps))
	defer tick.Stop()
	base := time.Now()
	sendStart := time.Now()
	for i := range n {
		<-tick.C
		at := base.Add(time.Duration(i) * 20 * time.Millisecond)
		ms := func(n int) time.Time { return at.Add(time.Duration(n) * time.Millisecond) }
		kind := i % 12 // 0..11: which shape of request
		ttft := 80 + (i*37)%400
		if kind == 4 {
			ttft = 1600 + i%300 // slow
		}
		out := 2 + i%20
		end := ttft + out*15 + 5
		rctx, rs := router.p().Tracer("router").Start(context.Background(), "route", trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(ms(-1)))
		var r *request
		if i%3 == 2 {
			r = sendVLLM(t, vllm, rctx, ms, kind, ttft, out, end)
		} else {
			e := engines[i%3]
			r = sendTracker(t, e.tr, rctx, fmt.Sprintf("%s-%d", e.name, i), ms, kind, ttft, out, end)
			r.engine = e.name
		}
		rs.End(trace.WithTimestamp(ms(end + 2)))
		r.traceID = rs.SpanContext().TraceID().String()
		reqs = append(reqs, r)
	}
	sent := time.Since(sendStart)
	for _, e := range engines {
		if err := e.tr.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []*provider{router, vllm, engines[0].p, engines[1].p} {
		if err := p.tp.ForceFlush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	// Ground truth: spans per trace from what every provider ended (the
	// vLLM spans' rebuilt children added), tracker values from RequestStats.
	counts := map[string]int{}
	for _, p := range []*provider{router, vllm, engines[0].p, engines[1].p} {
		for id, n := range spansPerTrace(p.rec) {
			counts[id] += n
		}
	}
	for _, r := range reqs {
		r.spans += counts[r.traceID]
		if s := stats[r.id()]; s != nil {
			r.fromStats(s)
		}
		r.keep = r.keep || probabilistic(mustTraceID(r.traceID), samplePercent)
	}
	total := 0
	for _, r := range reqs {
		total += r.spans
	}
	t.Logf("offered %d requests, %d spans in %s: %.0f spans/s", len(reqs), total, sent.Round(time.Millisecond), float64(total)/sent.Seconds())
	return reqs, sendStart
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

func (p *provider) p() trace.TracerProvider { return p.tp }

func mustTraceID(s string) trace.TraceID {
	id, err := trace.TraceIDFromHex(s)
	if err != nil {
		panic(err)
	}
	return id
}

// id is the tracker's request id, kept in reason until fromStats.
func (r *request) id() string { return r.reason }

func secs(l otelstats.Latency) float64 {
	if !l.Valid {
		return math.NaN()
	}
	return l.Value.Seconds()
}

func (r *request) fromStats(s *otelstats.RequestStats) {
	r.ttft, r.tpot, r.e2e = secs(s.FirstTokenLatency), secs(s.TimePerOutputToken), secs(s.E2ELatency)
	r.queue, r.prefill, r.decode, r.inference = secs(s.QueueDuration), secs(s.PrefillLatency), secs(s.DecodeLatency), secs(s.InferenceLatency)
	r.reason, r.output, r.preemptions = s.FinishReason, s.NumOutputTokens, s.NumPreemptions
	r.prompt = -1
	if s.NumPromptTokens.Valid {
		r.prompt = s.NumPromptTokens.N
	}
	switch {
	case s.FinishReason == "error" || s.FinishReason == "abort":
		r.keep = true
	case s.NumPreemptions > 0:
		r.keep = true
	case s.FirstTokenLatency.Valid && s.FirstTokenLatency.Value > slowTTFT:
		r.keep = true
	}
}

// sendTracker records one request through a Tracker under the router's
// span. kind 0: abort before the first token; 6: preempted; 9: error.
func sendTracker(t *testing.T, tr *otelstats.Tracker, rctx context.Context, id string, ms func(int) time.Time, kind, ttft, out, end int) *request {
	t.Helper()
	q, err := tr.Arrive(rctx, id, otelstats.Arrival{Time: ms(0), Model: "llama-3-8b"})
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	eng := func(k otelstats.Kind, at int, u otelstats.Update) {
		u.RequestID, u.Kind, u.Side, u.Time = id, k, otelstats.SideEngine, ms(at)
		must(tr.Record(u))
	}
	must(q.InputProcessed(ms(2), 64, nil))
	eng(otelstats.KindQueued, 3, otelstats.Update{})
	eng(otelstats.KindPrefilling, ttft/3, otelstats.Update{NumComputedTokens: 64, NumCachedTokens: 16})
	if kind == 0 {
		eng(otelstats.KindFinished, ttft/2, otelstats.Update{FinishReason: "abort"})
		must(q.Abort(ms(ttft/2 + 1)))
		return &request{reason: id}
	}
	at := ttft
	for j := range out {
		eng(otelstats.KindDecoding, at, otelstats.Update{NumNewTokens: 1})
		must(q.Detokenized(ms(at+1), 1, 0))
		if kind == 6 && j == out/2 {
			eng(otelstats.KindPreempted, at+2, otelstats.Update{})
			eng(otelstats.KindPrefilling, at+40, otelstats.Update{NumComputedTokens: 64 + j + 1})
			at += 40
		}
		at += 15
	}
	reason := "stop"
	if kind == 9 {
		reason = "error"
	}
	eng(otelstats.KindFinished, at, otelstats.Update{FinishReason: reason})
	if reason == "error" {
		must(q.Fail(ms(at+2), "engine_error"))
	} else {
		must(q.Finish(ms(at+2), reason))
	}
	return &request{reason: id}
}

// sendVLLM ends one llm_request span the way vLLM V1's OutputProcessor
// does: start at arrival, the frontend's TTFT and e2e, the engine core's
// queue, prefill, decode and inference, the JSON finish-reason list.
// kind 0: abort before the first token (TTFT 0.0, engine durations from
// unset stamps); 9: error.
func sendVLLM(t *testing.T, p *provider, rctx context.Context, ms func(int) time.Time, kind, ttft, out, end int) *request {
	t.Helper()
	queued, scheduled := 4, 4+ttft/4
	firstTok, lastTok := ttft-1, end-3 // engine core's view, 1-3 ms ahead of the frontend
	reason := "stop"
	r := &request{engine: "vllm-c", prompt: 64, output: out, preemptions: 0}
	lat := reconstruct.NoLatency()
	switch kind {
	case 0:
		reason, out, end = "abort", 0, ttft/2
		lat = reconstruct.Latency{TTFT: 0, E2E: float64(end) / 1000, Queue: -4123.5, Prefill: 0, Decode: 0, Inference: 0}
	default:
		if kind == 9 {
			reason = "error"
		}
		lat = reconstruct.Latency{TTFT: float64(ttft) / 1000, E2E: float64(end) / 1000,
			Queue: float64(scheduled-queued) / 1000, Prefill: float64(firstTok-scheduled) / 1000,
			Decode: float64(lastTok-firstTok) / 1000, Inference: float64(lastTok-scheduled) / 1000}
	}
	attrs := []attribute.KeyValue{
		attributes.LatencyTimeToFirstToken.Float64(lat.TTFT), attributes.LatencyE2E.Float64(lat.E2E),
		attributes.LatencyTimeInQueue.Float64(lat.Queue), attributes.LatencyPrefill.Float64(lat.Prefill),
		attributes.LatencyDecode.Float64(lat.Decode), attributes.LatencyInference.Float64(lat.Inference),
		attributes.EngineUsagePromptTokens.Int(64), attributes.EngineUsageCompletionTokens.Int(out),
		attributes.RequestID.String(fmt.Sprintf("cmpl-%d", kind)), attributes.FinishReasons.String(`["` + reason + `"]`),
	}
	_, s := p.tp.Tracer("vllm.llm_engine").Start(rctx, "llm_request", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(ms(0)), trace.WithAttributes(attrs...))
	if reason == "error" {
		s.SetStatus(codes.Error, "engine error")
	}
	s.End(trace.WithTimestamp(ms(end + 1)))

	// Ground truth, by the SPEC's definitions on vLLM's instants as the
	// frontend saw them: ARRIVED 0, first token ttft, FINISHED end.
	in := reconstruct.FromAttributes("llm_request", "vllm.llm_engine", ms(0), ms(end+1), attrs)
	rq, _ := reconstruct.Compute(&in, reconstruct.VLLM)
	var tree spans.Tree
	rq.Tree(&tree)
	r.spans = len(tree.Spans) - 1 // the rebuilt children
	r.reason, r.output = reason, out
	nan := math.NaN()
	r.e2e, r.ttft, r.tpot, r.queue, r.prefill, r.decode, r.inference = float64(end)/1000, nan, nan, nan, nan, nan, nan
	if kind != 0 {
		sched := float64(ttft-(firstTok-scheduled)) / 1000 // first token − prefill
		r.ttft = float64(ttft) / 1000
		r.queue = float64(scheduled-queued) / 1000
		r.prefill = r.ttft - sched
		r.decode = float64(end-ttft) / 1000
		r.inference = float64(end)/1000 - sched
		if out > 1 {
			r.tpot = r.decode / float64(out-1)
		}
	}
	r.keep = reason != "stop" || float64(ttft)/1000 > slowTTFT.Seconds() && kind != 0
	return r
}

// instrument is a derived histogram and the ground-truth value it records.
type histCheck struct {
	prom   string
	bounds []float64
	value  func(*request) float64
}

func checkMetrics(t *testing.T, ctx context.Context, prom *testbackend.Prometheus, reqs []*request) {
	t.Helper()
	// Every request counted, across both tier-2 collectors.
	want := float64(len(reqs))
	var got float64
	for {
		v, err := prom.QueryValue(ctx, `sum(llm_server_requests_total)`)
		if err == nil {
			got = v
		}
		if got >= want || ctx.Err() != nil {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if got != want {
		t.Fatalf("llm_server_requests_total sums to %v, want %v: requests lost before the connector", got, want)
	}
	byEngine := map[string][]*request{}
	for _, r := range reqs {
		byEngine[r.engine] = append(byEngine[r.engine], r)
	}
	hists := []histCheck{
		{"gen_ai_server_time_to_first_token_seconds", attributes.TimeToFirstTokenBuckets(), func(r *request) float64 { return r.ttft }},
		{"gen_ai_server_time_per_output_token_seconds", attributes.TimePerOutputTokenBuckets(), func(r *request) float64 { return r.tpot }},
		{"gen_ai_server_request_duration_seconds", attributes.RequestDurationBuckets(), func(r *request) float64 { return r.e2e }},
		{"llm_server_queue_duration_seconds", attributes.PhaseDurationBuckets(), func(r *request) float64 { return r.queue }},
		{"llm_server_prefill_duration_seconds", attributes.PhaseDurationBuckets(), func(r *request) float64 { return r.prefill }},
		{"llm_server_decode_duration_seconds", attributes.PhaseDurationBuckets(), func(r *request) float64 { return r.decode }},
		{"llm_server_inference_duration_seconds", attributes.PhaseDurationBuckets(), func(r *request) float64 { return r.inference }},
	}
	for engine, rs := range byEngine {
		sel := fmt.Sprintf(`exported_job=%q`, engine)
		for _, h := range hists {
			wantCum := make([]int, len(h.bounds)+1)
			var wantSum float64
			n := 0
			for _, r := range rs {
				v := h.value(r)
				if math.IsNaN(v) {
					continue
				}
				n++
				wantSum += v
				for i, b := range h.bounds {
					if v <= b+1e-9 {
						wantCum[i]++
					}
				}
				wantCum[len(h.bounds)]++
			}
			samples, err := prom.Query(ctx, fmt.Sprintf(`sum by (le) (%s_bucket{%s})`, h.prom, sel))
			if err != nil {
				t.Fatal(err)
			}
			gotCum := map[float64]float64{} // Prometheus writes le=1 as "1.0"
			for _, s := range samples {
				le, err := strconv.ParseFloat(s.Labels["le"], 64)
				if err != nil {
					t.Fatalf("%s: le %q: %v", h.prom, s.Labels["le"], err)
				}
				gotCum[le] = s.Value
			}
			if n == 0 {
				if len(samples) != 0 {
					t.Errorf("%s %s: %d buckets, want none", engine, h.prom, len(samples))
				}
				continue
			}
			for i, b := range h.bounds {
				if gotCum[b] != float64(wantCum[i]) {
					t.Errorf("%s %s le=%g: %v, want %d", engine, h.prom, b, gotCum[b], wantCum[i])
				}
			}
			if gotCum[math.Inf(1)] != float64(n) {
				t.Errorf("%s %s count %v, want %d", engine, h.prom, gotCum[math.Inf(1)], n)
			}
			sum, err := prom.QueryValue(ctx, fmt.Sprintf(`sum(%s_sum{%s})`, h.prom, sel))
			if err != nil || math.Abs(sum-wantSum) > 1e-6*float64(n) {
				t.Errorf("%s %s sum %v (%v), want %v", engine, h.prom, sum, err, wantSum)
			}
		}
		// Counters.
		reasons := map[string]float64{}
		var prompt, gen, pre float64
		for _, r := range rs {
			reasons[r.reason]++
			if r.prompt > 0 {
				prompt += float64(r.prompt)
			}
			gen += float64(r.output)
			pre += float64(r.preemptions)
		}
		samples, err := prom.Query(ctx, fmt.Sprintf(`sum by (llm_finish_reason) (llm_server_requests_total{%s})`, sel))
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, s := range samples {
			got[s.Labels["llm_finish_reason"]] = s.Value
		}
		if fmt.Sprint(sorted(got)) != fmt.Sprint(sorted(reasons)) {
			t.Errorf("%s requests by finish reason %v, want %v", engine, got, reasons)
		}
		for name, w := range map[string]float64{"llm_server_prompt_tokens_total": prompt, "llm_server_generation_tokens_total": gen, "llm_server_preemptions_total": pre} {
			v, err := prom.QueryValue(ctx, fmt.Sprintf(`sum(%s{%s}) or vector(0)`, name, sel))
			if err != nil || v != w {
				t.Errorf("%s %s = %v (%v), want %v", engine, name, v, err, w)
			}
		}
	}
}

func sorted(m map[string]float64) []string {
	var o []string
	for k, v := range m {
		o = append(o, fmt.Sprintf("%s=%v", k, v))
	}
	sort.Strings(o)
	return o
}

// jaegerSpan is a span read back from Jaeger as a ReadOnlySpan.
type jaegerSpan struct{ sdktrace.ReadOnlySpan }

// renderWaterfall draws a trace read back from Jaeger's API with the
// demo's terminal waterfall (examples/simengine/waterfall), so the README
// shows what a user's terminal shows.
func renderWaterfall(t *testing.T, tr *testbackend.Trace) string {
	t.Helper()
	ro := make([]sdktrace.ReadOnlySpan, 0, len(tr.Spans))
	for _, s := range tr.Spans {
		tid, _ := trace.TraceIDFromHex(s.TraceID)
		sid, _ := trace.SpanIDFromHex(s.SpanID)
		stub := tracetest.SpanStub{
			Name:        s.Name,
			SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}),
			SpanKind:    trace.SpanKind(s.Kind),
			StartTime:   s.Start(), EndTime: s.End(),
		}
		if s.ParentSpanID != "" {
			pid, _ := trace.SpanIDFromHex(s.ParentSpanID)
			stub.Parent = trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: pid, TraceFlags: trace.FlagsSampled})
		}
		for k, v := range s.Attributes {
			switch v := v.(type) {
			case string:
				stub.Attributes = append(stub.Attributes, attribute.String(k, v))
			case bool:
				stub.Attributes = append(stub.Attributes, attribute.Bool(k, v))
			case int64:
				stub.Attributes = append(stub.Attributes, attribute.Int64(k, v))
			case float64:
				stub.Attributes = append(stub.Attributes, attribute.Float64(k, v))
			}
		}
		if s.ServiceName != "" {
			stub.Resource = resource.NewSchemaless(attribute.String("service.name", s.ServiceName))
		}
		// A pointer: waterfall.FromSpans compares spans, and a snapshot
		// value is not comparable.
		ro = append(ro, &jaegerSpan{stub.Snapshot()})
	}
	w, err := waterfall.FromSpans(ro)
	if err != nil {
		t.Fatal(err)
	}
	w.Title = "router → vLLM llm_request, children rebuilt by the llmtrace processor"
	if s, ok := tr.Span("llm_request"); ok {
		w.RequestID, _ = s.Attributes[string(attributes.RequestID)].(string)
	}
	var b strings.Builder
	w.Text(&b, 48)
	return b.String()
}
