package otelstats

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	promexp "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/spans"
)

// runRequest drives one request through the tracker: ttftMs to the first
// token, then n-1 more tokens itlMs apart, optionally preempted once.
func runRequest(t *testing.T, tr *Tracker, id string, start float64, ttftMs, itlMs float64, n int, preempt bool, reason string) {
	t.Helper()
	rec := func(u Update) {
		t.Helper()
		u.RequestID = id
		if err := tr.Record(u); err != nil {
			t.Fatal(err)
		}
	}
	rec(Update{Kind: KindArrived, Time: at(start), Model: "m"})
	rec(Update{Kind: KindQueued, Time: at(start + 1)})
	rec(Update{Kind: KindPrefilling, Time: at(start + 2), NumComputedTokens: 8})
	now := start + ttftMs
	for i := 0; i < n; i++ {
		if preempt && i == 1 {
			rec(Update{Kind: KindPreempted, Time: at(now - itlMs + 1)})
			rec(Update{Kind: KindPrefilling, Time: at(now - itlMs + 2), NumComputedTokens: 9})
		}
		rec(Update{Kind: KindDecoding, Time: at(now)})
		now += itlMs
	}
	rec(Update{Kind: KindFinished, Side: SideEngine, Time: at(now), FinishReason: reason})
	// The frontend (present: it sent ARRIVED) reports no FINISHED here;
	// end the wait for it as a log's end would.
	tr.Flush()
}

func TestSamplingPolicyRules(t *testing.T) {
	policy := &SamplingPolicy{KeepErrors: true, KeepPreempted: true, TTFTAbove: 500 * time.Millisecond,
		TPOTAbove: 100 * time.Millisecond, E2EAbove: 5 * time.Second}
	cases := []struct {
		name       string
		ttft, itl  float64
		n          int
		preempt    bool
		reason     string
		wantKeep   bool
		wantReason string
	}{
		{"fast ok request is dropped", 50, 20, 10, false, "stop", false, NotSampled},
		{"abort is kept", 50, 20, 10, false, "abort", true, SampledError},
		{"error is kept", 50, 20, 10, false, "error", true, SampledError},
		{"preempted is kept", 50, 20, 10, true, "stop", true, SampledPreempted},
		{"slow ttft is kept", 600, 20, 10, false, "stop", true, SampledSlowTTFT},
		{"slow tpot is kept", 50, 150, 10, false, "stop", true, SampledSlowTPOT},
		{"slow e2e is kept", 50, 90, 80, false, "length", true, SampledSlowE2E},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, WithSampling(policy))
			runRequest(t, h.tr, "r", 0, tc.ttft, tc.itl, tc.n, tc.preempt, tc.reason)
			s := h.statsOf("r")
			if s.Sampled != tc.wantKeep || s.SamplingReason != tc.wantReason {
				t.Fatalf("sampled=%v reason=%q, want %v %q", s.Sampled, s.SamplingReason, tc.wantKeep, tc.wantReason)
			}
			ended := h.rec.Ended()
			if !tc.wantKeep && len(ended) != 0 {
				t.Fatalf("dropped trace exported %d spans", len(ended))
			}
			if tc.wantKeep {
				root := findSpan(t, ended, "chat m")
				if v := sattr(root.Attributes(), attributes.SamplingReason); v != tc.wantReason {
					t.Errorf("root llm.sampling.reason = %q, want %q", v, tc.wantReason)
				}
			}
			// Metrics count the request whether or not it was kept.
			if n := h.counter(attributes.MetricRequests); n != 1 {
				t.Errorf("llm.server.requests = %d, want 1", n)
			}
			if c, _ := h.histCount(attributes.MetricTimeToFirstToken); c != 1 {
				t.Errorf("TTFT count = %d, want 1", c)
			}
		})
	}
}

func TestSamplingDefaultKeepsEverything(t *testing.T) {
	h := newHarness(t)
	runRequest(t, h.tr, "r", 0, 50, 20, 5, false, "stop")
	if s := h.statsOf("r"); !s.Sampled || s.SamplingReason != SampledAll {
		t.Fatalf("default: sampled=%v reason=%q", s.Sampled, s.SamplingReason)
	}
}

// The library reads no environment: LLMTRACE_SAMPLING is otelconf's.
func TestSamplingIgnoresEnvironment(t *testing.T) {
	t.Setenv("LLMTRACE_SAMPLING", "ratio=0")
	tr, err := NewTracker()
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	if tr.sampler != nil {
		t.Fatalf("the tracker read LLMTRACE_SAMPLING: %+v", tr.sampler.p)
	}
}

// The ratio rule keeps Ratio of the rest within statistical bounds: with
// p = 0.1 and n = 100,000, the binomial σ is √(n·p·(1−p)) ≈ 94.9, so 5σ is
// ±475 around 10,000.
func TestSamplingRatioWithinBounds(t *testing.T) {
	s := newSampler(&SamplingPolicy{Ratio: 0.1})
	rng := rand.New(rand.NewPCG(1, 2))
	kept := 0
	const n = 100_000
	for range n {
		var id [16]byte
		binary.BigEndian.PutUint64(id[:8], rng.Uint64())
		binary.BigEndian.PutUint64(id[8:], rng.Uint64())
		st := RequestStats{FinishReason: "stop", E2ELatency: some(time.Second)}
		if ok, _ := s.decide(&st, id, false, false); ok {
			kept++
		}
	}
	sigma := math.Sqrt(n * 0.1 * 0.9)
	if d := math.Abs(float64(kept) - n*0.1); d > 5*sigma {
		t.Fatalf("kept %d of %d, more than 5σ (%.0f) from %d", kept, n, 5*sigma, n/10)
	}
}

func TestSamplingRunningPercentile(t *testing.T) {
	h := newHarness(t, WithSampling(&SamplingPolicy{Percentile: 90}))
	// 300 requests with TTFT 10..309 ms; once the threshold is computed
	// (every 100 requests), only the slowest 10% of the window pass.
	for i := range 300 {
		runRequest(t, h.tr, fmt.Sprint("r", i), float64(i*1000), float64(10+i%100), 5, 2, false, "stop")
	}
	kept := 0
	for _, s := range h.stats[100:] {
		if s.Sampled {
			kept++
			if s.SamplingReason != SampledSlowTTFT && s.SamplingReason != SampledSlowE2E {
				t.Errorf("kept for %q", s.SamplingReason)
			}
		}
	}
	// 200 requests judged against p90 of a uniform window: about 10% each.
	if kept < 10 || kept > 40 {
		t.Fatalf("kept %d of 200 over p90, want about 20", kept)
	}
}

func TestTrustedParentDecides(t *testing.T) {
	for _, trust := range []bool{false, true} {
		for _, sampled := range []bool{false, true} {
			t.Run(fmt.Sprintf("trust=%v,sampled=%v", trust, sampled), func(t *testing.T) {
				h := newHarness(t, WithTrustParentSampling(trust))
				flags := trace.TraceFlags(0)
				if sampled {
					flags = trace.FlagsSampled
				}
				parent := trace.NewSpanContext(trace.SpanContextConfig{
					TraceID: spans.NewTraceID(), SpanID: spans.NewSpanID(), TraceFlags: flags, Remote: true})
				ctx := trace.ContextWithRemoteSpanContext(context.Background(), parent)
				req, err := h.tr.Arrive(ctx, "r", Arrival{Time: at(0), Model: "m"})
				if err != nil {
					t.Fatal(err)
				}
				if req.SpanContext().TraceID() != parent.TraceID() {
					t.Fatal("the request did not join the parent's trace")
				}
				_ = req.Detokenized(at(10), 1, 0)
				_ = req.Finish(at(20), "stop")
				wantKeep := !trust || sampled
				if got := len(h.rec.Ended()) > 0; got != wantKeep {
					t.Fatalf("exported=%v, want %v", got, wantKeep)
				}
				if wantKeep {
					root := findSpan(t, h.rec.Ended(), "chat m")
					if root.Parent().SpanID() != parent.SpanID() || root.SpanContext().TraceID() != parent.TraceID() {
						t.Fatal("root is not the parent's child")
					}
					if root.SpanContext().SpanID() != req.SpanContext().SpanID() {
						t.Fatal("root span id differs from the one handed out at arrival")
					}
				}
			})
		}
	}
}

func TestDetailLevelsShape(t *testing.T) {
	cases := []struct {
		d         Detail
		wantSpans int
		steps     bool
		offsets   bool
	}{
		{DetailRoot, 1, false, false},
		{DetailTree, 5, false, false}, // root, queue, prefill, decode, detokenize
		{DetailSteps, 5, true, false},
		{DetailTokens, 5, true, true},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprint("level", int(tc.d)-1), func(t *testing.T) {
			h := newHarness(t, WithDetail(tc.d))
			req, _ := h.tr.Arrive(context.Background(), "r", Arrival{Time: at(0), Model: "m"})
			step := &Step{Time: at(1), Queued: []string{"r"}}
			mustOK(t, h.tr.Step(step))
			mustOK(t, h.tr.Step(&Step{Time: at(2), Scheduled: []Scheduled{{RequestID: "r", ComputedTokens: 4}}}))
			for i := range 4 {
				mustOK(t, h.tr.Step(&Step{Time: at(10 + 10*float64(i)), Decoded: []Decoded{{RequestID: "r"}, {RequestID: "other"}}}))
				mustOK(t, req.Detokenized(at(11+10*float64(i)), 1, 0))
			}
			mustOK(t, h.tr.Step(&Step{Time: at(45), Finished: []Finished{{RequestID: "r", Reason: "stop"}}}))
			mustOK(t, req.Finish(at(46), "stop"))
			ended := h.rec.Ended()
			if len(ended) != tc.wantSpans {
				t.Fatalf("%d spans, want %d", len(ended), tc.wantSpans)
			}
			root := findSpan(t, ended, "chat m")
			if sattr(root.Attributes(), attributes.LatencyTimeToFirstToken) == "" {
				t.Error("root lacks gen_ai.latency.time_to_first_token")
			}
			if tc.d == DetailRoot {
				return
			}
			dec := findSpan(t, ended, attributes.SpanDecode)
			if got := len(dec.Events()) > 0; got != tc.steps {
				t.Errorf("decode step events present = %v, want %v", got, tc.steps)
			}
			if tc.steps {
				if len(dec.Events()) != 4 || sattr(dec.Events()[0].Attributes, attributes.StepBatchSize) != "2" {
					t.Errorf("step events = %+v", dec.Events())
				}
			}
			offs := sattr(dec.Attributes(), attributes.DecodeTokenOffsets)
			if (offs != "") != tc.offsets {
				t.Errorf("token offsets = %q, want present=%v", offs, tc.offsets)
			}
			if tc.offsets && offs != "[0,10000,20000,30000]" {
				t.Errorf("token offsets = %s, want [0,10000,20000,30000] (µs from the first delivery at 11ms)", offs)
			}
		})
	}
}

// Exemplars on the latency histograms point at kept traces, visible in the
// Prometheus exposition (OpenMetrics); dropped traces leave none.
func TestExemplarsPointAtKeptTraces(t *testing.T) {
	reg := prometheus.NewRegistry()
	exp, err := promexp.New(promexp.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithIDGenerator(spans.IDGenerator()))
	var stats []RequestStats
	tr, err := NewTracker(WithTracerProvider(tp), WithMeterProvider(mp),
		WithSampling(&SamplingPolicy{TTFTAbove: 300 * time.Millisecond}),
		WithOnFinish(func(s *RequestStats) { stats = append(stats, *s) }))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	runRequest(t, tr, "fast", 0, 50, 10, 3, false, "stop")
	runRequest(t, tr, "slow", 1000, 900, 10, 3, false, "stop")
	if stats[0].Sampled || !stats[1].Sampled {
		t.Fatalf("sampling: fast=%v slow=%v", stats[0].Sampled, stats[1].Sampled)
	}

	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true}))
	defer srv.Close()
	req, _ := http.NewRequest("GET", srv.URL, nil)
	req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ttftExemplars []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "gen_ai_server_time_to_first_token_seconds_bucket") && strings.Contains(line, "# {") {
			ttftExemplars = append(ttftExemplars, line)
		}
	}
	if len(ttftExemplars) != 1 {
		t.Fatalf("TTFT exemplars = %q, want exactly the slow request's", ttftExemplars)
	}
	if !strings.Contains(ttftExemplars[0], stats[1].TraceID) {
		t.Fatalf("exemplar %q does not point at kept trace %s", ttftExemplars[0], stats[1].TraceID)
	}
	found := false
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID().String() == stats[1].TraceID {
			found = true
		}
	}
	if !found {
		t.Fatal("the exemplar's trace was not exported")
	}
}

func sattr(kvs []attribute.KeyValue, k attribute.Key) string {
	v, ok := attrOf(kvs, k)
	if !ok {
		return ""
	}
	return v.String()
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func findSpan(t *testing.T, ss []sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	for _, s := range ss {
		if s.Name() == name {
			return s
		}
	}
	t.Fatalf("no span %q", name)
	return nil
}

// TestWithoutTraces: WithTraces(false) builds no span, whatever the
// policy keeps, reports every request not sampled (traces_off), and
// leaves the metrics and stats as they are with traces.
func TestWithoutTraces(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprint("traces=", on), func(t *testing.T) {
			h := newHarness(t, WithTraces(on), WithSampling(&SamplingPolicy{Ratio: 1}))
			runRequest(t, h.tr, "r", 0, 50, 20, 5, true, "stop")
			s := h.statsOf("r")
			wantReason, wantSpans := SampledRatio, 1
			if !on {
				wantReason, wantSpans = NotTraced, 0
			}
			if s.Sampled != on || s.SamplingReason != wantReason || !s.FirstTokenLatency.Valid || s.NumOutputTokens != 5 || s.NumPreemptions != 1 {
				t.Errorf("stats %+v", s)
			}
			if got := len(h.rec.Ended()); (got > 0) != (wantSpans > 0) {
				t.Errorf("%d spans ended, traces=%v", got, on)
			}
			h.wantHist(attributes.MetricTimeToFirstToken, 1, 50)
		})
	}
}
