package simengine

// End-to-end tests of the demo against real backends (issue 3, items 2 and
// 3): Jaeger v2 receiving the traces over OTLP gRPC, and Prometheus scraping
// /metrics. They run the demo in-process and read back through the
// backends' own query APIs. testbackend skips them when a binary is missing
// locally and fails them under CI (env CI set): run them through
// `bash scripts/test.sh`, which builds Jaeger and installs Prometheus.

import (
	"context"
	"fmt"
	"math"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/e2e/testbackend"
	"github.com/llmtrace/llmtrace/examples/simengine/demo"
	"github.com/llmtrace/llmtrace/internal/summary"
	"github.com/llmtrace/llmtrace/otelstats"
)

// e2eOptions is a few hundred requests of the default workload on a KV
// cache small enough that some requests are preempted mid-decode.
func e2eOptions(n int) demo.Options {
	o := demo.DefaultOptions()
	o.Requests = n
	o.Engine.NumBlocks = 1024
	o.Progress = false
	return o
}

// allFeatures turns on every serving feature of SPEC §7–9: P/D with
// failing transfers, speculative decoding, three adapters, images, and
// clients that disconnect.
func allFeatures(o *demo.Options) {
	o.PD = true
	o.Engine.PD.FailureRate = 0.1
	o.SpecDecode = true
	o.Adapters = "sql-lora=0.3,chat-lora=0.2,code-lora=0.1"
	o.Multimodal = 0.3
	o.Engine.AbortRate = 0.05
}

// exportedSpans records, per trace, the ids of the spans the SDK ended (and
// so handed to the exporter).
type exportedSpans struct {
	mu     sync.Mutex
	traces map[string][]string
}

func (e *exportedSpans) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (e *exportedSpans) Shutdown(context.Context) error                  { return nil }
func (e *exportedSpans) ForceFlush(context.Context) error                { return nil }
func (e *exportedSpans) OnEnd(s sdktrace.ReadOnlySpan) {
	e.mu.Lock()
	defer e.mu.Unlock()
	id := s.SpanContext().TraceID().String()
	e.traces[id] = append(e.traces[id], s.SpanContext().SpanID().String())
}

// TestJaegerEndToEnd runs the demo exporting over OTLP gRPC to a real
// Jaeger and checks through Jaeger's query API that every request's trace
// arrived whole and has SPEC §3's shape.
func TestJaegerEndToEnd(t *testing.T) {
	j := testbackend.StartJaeger(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+j.OTLPGRPCEndpoint())
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_METRICS_EXPORTER", "none") // Jaeger takes traces only
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	t.Setenv("OTEL_TRACES_SAMPLER", "")
	t.Setenv("OTEL_SERVICE_NAME", "simengine-e2e")
	// The replay ends a few hundred requests' spans within a second; a
	// queue that holds them all means none is dropped before export.
	t.Setenv("OTEL_BSP_MAX_QUEUE_SIZE", "65536")
	t.Setenv("LLMTRACE_SAMPLING", "")
	t.Setenv("LLMTRACE_DETAIL", "")

	const n = 300
	exp := &exportedSpans{traces: map[string][]string{}}
	var (
		mu    sync.Mutex
		stats []otelstats.RequestStats
	)
	o := e2eOptions(n)
	o.SpanProcessors = append(o.SpanProcessors, exp)
	o.OnFinish = func(s *otelstats.RequestStats) {
		mu.Lock()
		c := *s
		c.OutputTokenLatencies = nil
		stats = append(stats, c)
		mu.Unlock()
	}
	rep, err := demo.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.TracesExported {
		t.Fatal("the demo did not turn on OTLP trace export")
	}
	if len(stats) != n {
		t.Fatalf("%d requests finished, want %d", len(stats), n)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	model := o.Engine.Model
	var preemptedWithTwoSegments, preempted, zeroDur int
	for i := range stats {
		s := &stats[i]
		want := exp.traces[s.TraceID]
		if len(want) == 0 {
			t.Fatalf("%s: the SDK ended no span of trace %s", s.RequestID, s.TraceID)
		}
		tr, err := j.WaitTrace(ctx, s.TraceID, len(want))
		if err != nil {
			t.Fatalf("%s: %v", s.RequestID, err)
		}
		var got []string
		for _, sp := range tr.Spans {
			got = append(got, sp.SpanID)
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: Jaeger holds spans %v, the SDK exported %v", s.RequestID, got, want)
			continue
		}
		zeroDur += undoZeroDurationSanitizer(tr)
		segs, err := checkTrace(tr, s, model)
		if err != nil {
			t.Errorf("%s (trace %s): %v", s.RequestID, s.TraceID, err)
			continue
		}
		if s.NumPreemptions > 0 {
			preempted++
			if segs >= 2 {
				preemptedWithTwoSegments++
			}
		}
	}
	t.Logf("%d traces checked in Jaeger; %d preempted requests, %d of them with two or more decode segments; %d zero-length spans stored by Jaeger as 1ns",
		len(stats), preempted, preemptedWithTwoSegments, zeroDur)
	if preemptedWithTwoSegments == 0 {
		t.Errorf("no preempted request with two decode segments in the run; the test proves less than it should")
	}
	if svcs, err := j.Services(ctx); err != nil || !slices.Contains(svcs, "simengine-e2e") {
		t.Errorf("Jaeger services %v (%v), want simengine-e2e", svcs, err)
	}
}

// jaegerWarnings is the span attribute Jaeger puts its ingestion warnings in.
const jaegerWarnings = "@jaeger@warnings"

// undoZeroDurationSanitizer reverses what Jaeger v2 does to a span whose end
// equals its start (a queue wait of zero when a request is scheduled in the
// step that queued it): its "negative duration" sanitizer moves the end to
// start + 1ns and adds a warning. Such spans get their exported end back;
// it returns how many there were. Any other warning stays and fails the
// check.
func undoZeroDurationSanitizer(tr *testbackend.Trace) int {
	n := 0
	for i := range tr.Spans {
		sp := &tr.Spans[i]
		w, ok := sp.Attributes[jaegerWarnings].([]any)
		if !ok || len(w) != 1 || sp.Duration() != time.Nanosecond {
			continue
		}
		if msg, _ := w[0].(string); strings.HasPrefix(msg, "Negative duration detected") {
			sp.EndUnixNano = sp.StartUnixNano
			delete(sp.Attributes, jaegerWarnings)
			n++
		}
	}
	return n
}

// checkTrace checks one trace read back from Jaeger against SPEC §3 and the
// request's own RequestStats. It returns the number of decode segments.
func checkTrace(tr *testbackend.Trace, s *otelstats.RequestStats, model string) (int, error) {
	root, ok := tr.Root()
	if !ok {
		return 0, fmt.Errorf("no root span")
	}
	if err := checkRoot(root, s, model); err != nil {
		return 0, err
	}
	if err := checkChildren(tr, root); err != nil {
		return 0, err
	}
	return checkRuns(tr, root, s)
}

// checkRoot checks the root span's name, kind, ids, bounds and attributes.
func checkRoot(root testbackend.Span, s *otelstats.RequestStats, model string) error {
	// Root: name, kind, ids, time bounds.
	if want := "chat " + model; root.Name != want {
		return fmt.Errorf("root named %q, want %q", root.Name, want)
	}
	if root.Kind != testbackend.SpanKindServer {
		return fmt.Errorf("root kind %d, want SERVER (%d)", root.Kind, testbackend.SpanKindServer)
	}
	if root.SpanID != s.SpanID {
		return fmt.Errorf("root span id %s, the request's %s", root.SpanID, s.SpanID)
	}
	if int64(root.StartUnixNano) != s.ArrivalTime.UnixNano() || int64(root.EndUnixNano) != s.FinishedTime.UnixNano() {
		return fmt.Errorf("root %d–%d, request %d–%d", root.StartUnixNano, root.EndUnixNano, s.ArrivalTime.UnixNano(), s.FinishedTime.UnixNano())
	}
	if root.Status.Code != testbackend.StatusUnset {
		return fmt.Errorf("root status %+v on a %q request", root.Status, s.FinishReason)
	}
	// Root attributes.
	a := root.Attributes
	secs := func(l otelstats.Latency) float64 { return l.Value.Seconds() }
	for k, want := range map[attribute.Key]any{
		attributes.OperationName:           "chat",
		attributes.RequestModel:            model,
		attributes.RequestID:               s.RequestID,
		attributes.UsageInputTokens:        int64(s.NumPromptTokens.N),
		attributes.UsageOutputTokens:       int64(s.NumOutputTokens),
		attributes.UsageCacheReadInput:     int64(s.NumCachedTokens.N),
		attributes.Preemptions:             int64(s.NumPreemptions),
		attributes.LatencyTimeToFirstToken: secs(s.FirstTokenLatency),
		attributes.LatencyE2E:              secs(s.E2ELatency),
		attributes.LatencyTimeInQueue:      secs(s.QueueDuration),
		attributes.LatencyPrefill:          secs(s.PrefillLatency),
		attributes.LatencyDecode:           secs(s.DecodeLatency),
		attributes.LatencyInference:        secs(s.InferenceLatency),
		attributes.RequestTemperature:      0.7,
	} {
		if got, ok := a[string(k)]; !ok || got != want {
			return fmt.Errorf("root attribute %s = %v (%T), want %v (%T)", k, got, got, want, want)
		}
	}
	if fr, ok := a[string(attributes.FinishReasons)].([]any); !ok || len(fr) != 1 || fr[0] != s.FinishReason {
		return fmt.Errorf("root %s = %v, want [%s]", attributes.FinishReasons, a[string(attributes.FinishReasons)], s.FinishReason)
	}

	return nil
}

// checkChildren checks that every other span is an INTERNAL child of the
// root, inside it.
func checkChildren(tr *testbackend.Trace, root testbackend.Span) error {
	// Children: INTERNAL, parented by the root, inside it, not negative.
	count := map[string]int{}
	for _, sp := range tr.Spans {
		if sp.SpanID == root.SpanID {
			continue
		}
		count[sp.Name]++
		if w, ok := sp.Attributes[jaegerWarnings]; ok {
			return fmt.Errorf("%s: Jaeger warns %v", sp.Name, w)
		}
		if sp.Kind != testbackend.SpanKindInternal {
			return fmt.Errorf("%s kind %d, want INTERNAL (%d)", sp.Name, sp.Kind, testbackend.SpanKindInternal)
		}
		if sp.ParentSpanID != root.SpanID {
			return fmt.Errorf("%s parent %s, want the root %s", sp.Name, sp.ParentSpanID, root.SpanID)
		}
		if sp.StartUnixNano < root.StartUnixNano || sp.EndUnixNano > root.EndUnixNano || sp.EndUnixNano < sp.StartUnixNano {
			return fmt.Errorf("%s [%d, %d] is not inside the root [%d, %d]", sp.Name, sp.StartUnixNano, sp.EndUnixNano, root.StartUnixNano, root.EndUnixNano)
		}
	}
	if count[attributes.SpanInputProcessing] != 1 || count[attributes.SpanDetokenize] != 1 {
		return fmt.Errorf("span counts %v: want one input_processing and one detokenize", count)
	}

	return nil
}

// checkRuns checks the queue waits, prefill runs and decode segments
// against the request's preemptions. It returns the decode segments.
func checkRuns(tr *testbackend.Trace, root testbackend.Span, s *otelstats.RequestStats) (int, error) {
	// Queue waits: one new, one per preemption.
	var newQ, preQ []testbackend.Span
	for _, q := range tr.SpansNamed(attributes.SpanQueue) {
		switch q.Attributes[string(attributes.QueueReason)] {
		case attributes.QueueReasonNew:
			newQ = append(newQ, q)
		case attributes.QueueReasonPreempted:
			preQ = append(preQ, q)
		default:
			return 0, fmt.Errorf("queue span with reason %v", q.Attributes[string(attributes.QueueReason)])
		}
	}
	if len(newQ) != 1 || len(preQ) != s.NumPreemptions {
		return 0, fmt.Errorf("%d new and %d preempted queue spans for %d preemptions", len(newQ), len(preQ), s.NumPreemptions)
	}
	if got := time.Duration(newQ[0].Duration()); got != s.QueueDuration.Value {
		return 0, fmt.Errorf("queue span %v, queue_duration %v", got, s.QueueDuration.Value)
	}

	// Prefill runs: one per run, recompute after the first; the first ends
	// at the first token (TTFT = its end − the root's start).
	prefills := tr.SpansNamed(attributes.SpanPrefill)
	if len(prefills) != s.NumPreemptions+1 {
		return 0, fmt.Errorf("%d prefill spans for %d preemptions", len(prefills), s.NumPreemptions)
	}
	for i, p := range prefills {
		if p.Attributes[string(attributes.PrefillRecompute)] != (i > 0) {
			return 0, fmt.Errorf("prefill %d recompute = %v", i, p.Attributes[string(attributes.PrefillRecompute)])
		}
	}
	if ttft := time.Duration(prefills[0].EndUnixNano - root.StartUnixNano); ttft != s.FirstTokenLatency.Value {
		return 0, fmt.Errorf("first prefill ends %v after arrival, TTFT is %v", ttft, s.FirstTokenLatency.Value)
	}
	if c := prefills[0].Attributes[string(attributes.PrefillCachedTokens)]; c != int64(s.NumCachedTokens.N) {
		return 0, fmt.Errorf("first prefill cached tokens %v, request %d", c, s.NumCachedTokens.N)
	}

	// Decode segments: numbered in order, tokens adding up; each preempted
	// wait starts where a run ended and ends where the next prefill starts.
	decodes := tr.SpansNamed(attributes.SpanDecode)
	sort.SliceStable(decodes, func(i, k int) bool {
		return decodes[i].Attributes[string(attributes.DecodeSegment)].(int64) < decodes[k].Attributes[string(attributes.DecodeSegment)].(int64)
	})
	var tokens int64
	for i, d := range decodes {
		if seg := d.Attributes[string(attributes.DecodeSegment)]; seg != int64(i) {
			return 0, fmt.Errorf("decode span %d has segment %v", i, seg)
		}
		tokens += d.Attributes[string(attributes.DecodeOutputTokens)].(int64)
	}
	if len(decodes) == 0 || len(decodes) > s.NumPreemptions+1 || tokens != int64(s.NumOutputTokens) {
		return 0, fmt.Errorf("%d decode segments with %d tokens; %d preemptions, %d output tokens", len(decodes), tokens, s.NumPreemptions, s.NumOutputTokens)
	}
	for i, q := range preQ {
		if q.EndUnixNano != prefills[i+1].StartUnixNano {
			return 0, fmt.Errorf("preempted wait %d ends at %d, the next prefill starts at %d", i, q.EndUnixNano, prefills[i+1].StartUnixNano)
		}
		if q.StartUnixNano < prefills[i].StartUnixNano {
			return 0, fmt.Errorf("preempted wait %d starts before its run", i)
		}
	}
	var preempted time.Duration
	for _, q := range preQ {
		preempted += q.Duration()
	}
	if preempted != s.PreemptedDuration {
		return 0, fmt.Errorf("preempted waits sum to %v, preempted_duration is %v", preempted, s.PreemptedDuration)
	}
	return len(decodes), nil
}

// TestPrometheusEndToEnd runs the demo serving /metrics, lets a real
// Prometheus scrape it, and checks PromQL against the demo's own summary:
// request and TTFT counts exactly, and the p99 TTFT from the histogram
// buckets against the bucket that holds the demo's exact p99.
func TestPrometheusEndToEnd(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	prom := testbackend.StartPrometheus(t, []string{ln.Addr().String()}, 200*time.Millisecond)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "")

	const n = 500
	o := e2eOptions(n)
	o.MetricsListener = ln
	checked := false
	o.OnDone = func(rep *demo.Report) {
		// The run is over and /metrics still serves its final values.
		checked = true
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		col := rep.Summary
		const ttft = "gen_ai_server_time_to_first_token_seconds"
		// Wait for a scrape taken after the run.
		countQ := fmt.Sprintf(`sum(%s_count{job="llmtrace"})`, ttft)
		var got float64
		deadline := time.Now().Add(time.Minute)
		for {
			v, err := prom.QueryValue(ctx, countQ)
			if err == nil && v == float64(len(col.TTFT)) {
				got = v
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s = %v (%v), want %d", countQ, v, err, len(col.TTFT))
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("%s = %v", countQ, got)

		if v, err := prom.QueryValue(ctx, `sum(llm_server_requests_total{job="llmtrace"})`); err != nil || v != float64(col.Requests) {
			t.Errorf("sum(llm_server_requests_total) = %v (%v), want %d", v, err, col.Requests)
		}
		if v, err := prom.QueryValue(ctx, `sum(llm_server_preemptions_total{job="llmtrace"})`); err != nil || v != float64(col.Preemptions) {
			t.Errorf("sum(llm_server_preemptions_total) = %v (%v), want %d", v, err, col.Preemptions)
		}

		// p99 TTFT. The demo's p99 is an exact sample (nearest rank,
		// rank ⌈0.99·n⌉); Prometheus only has the bucket counts and
		// interpolates linearly inside the bucket where the cumulative
		// count first reaches 0.99·n. Both pick the same bucket (counts are
		// integers, so cumulative ≥ 0.99·n iff ≥ ⌈0.99·n⌉), so the
		// tolerance is exactly that bucket: PromQL's answer must lie in
		// [lower, upper] of the bucket that holds the demo's p99.
		p99, _ := summary.Percentile(col.TTFT, 99)
		lo, hi := bucketOf(p99, attributes.TimeToFirstTokenBuckets())
		q := fmt.Sprintf(`histogram_quantile(0.99, sum by (le) (%s_bucket{job="llmtrace"}))`, ttft)
		v, err := prom.QueryValue(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("demo p99 TTFT %.4fs in bucket (%g, %g]; PromQL %s = %.4f", p99, lo, hi, q, v)
		if v < lo || v > hi {
			t.Errorf("PromQL p99 TTFT %.4f lies outside the bucket (%g, %g] of the demo's p99 %.4f", v, lo, hi, p99)
		}
		// The dashboard's form, for the record: rate() sees only the
		// increases between scrapes, so it misses whatever a series had
		// counted by its first scrape, and is not compared.
		qr := fmt.Sprintf(`histogram_quantile(0.99, sum by (le) (rate(%s_bucket{job="llmtrace"}[5m])))`, ttft)
		if vr, err := prom.QueryValue(ctx, qr); err == nil {
			t.Logf("%s = %.4f", qr, vr)
		}
	}
	rep, err := demo.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if !checked {
		t.Fatal("OnDone never ran")
	}
	if rep.MetricsURL == "" || rep.Summary.Requests != n {
		t.Errorf("metrics URL %q, %d requests", rep.MetricsURL, rep.Summary.Requests)
	}
}

// bucketOf returns the bounds (lower, upper] of the histogram bucket that
// holds v.
func bucketOf(v float64, bounds []float64) (lo, hi float64) {
	lo = 0
	for _, b := range bounds {
		if v <= b {
			return lo, b
		}
		lo = b
	}
	return lo, math.Inf(1)
}
