package llmtraceconnector

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/connector/connectortest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/otelcol/internal/spantest"
	"github.com/llmtrace/llmtrace/otelstats"
	"github.com/llmtrace/llmtrace/spans"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// point is one data point, comparable across the SDK's and pdata's forms.
type point struct {
	count  uint64
	sum    float64
	bounds string
	counts string
	value  int64
}

type series map[string]point // "metric{attrs}" → point

func key(name string, attrs map[string]string) string {
	var kv []string
	for k, v := range attrs {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	return name + "{" + strings.Join(kv, ",") + "}"
}

func fromPdata(md pmetric.Metrics) (series, map[string]string) {
	out, units := series{}, map[string]string{}
	for i := 0; i < md.ResourceMetrics().Len(); i++ {
		sms := md.ResourceMetrics().At(i).ScopeMetrics()
		for j := 0; j < sms.Len(); j++ {
			ms := sms.At(j).Metrics()
			for k := 0; k < ms.Len(); k++ {
				m := ms.At(k)
				units[m.Name()] = m.Unit()
				attrs := func(a pcommon.Map) map[string]string {
					o := map[string]string{}
					for k, v := range a.All() {
						o[k] = v.AsString()
					}
					return o
				}
				switch m.Type() {
				case pmetric.MetricTypeHistogram:
					dps := m.Histogram().DataPoints()
					for d := 0; d < dps.Len(); d++ {
						dp := dps.At(d)
						out[key(m.Name(), attrs(dp.Attributes()))] = point{count: dp.Count(), sum: dp.Sum(),
							bounds: fmt.Sprint(dp.ExplicitBounds().AsRaw()), counts: fmt.Sprint(dp.BucketCounts().AsRaw())}
					}
				case pmetric.MetricTypeSum:
					dps := m.Sum().DataPoints()
					for d := 0; d < dps.Len(); d++ {
						out[key(m.Name(), attrs(dps.At(d).Attributes()))] = point{value: dps.At(d).IntValue()}
					}
				}
			}
		}
	}
	return out, units
}

func fromSDK(rm metricdata.ResourceMetrics) (series, map[string]string) {
	out, units := series{}, map[string]string{}
	attrs := func(s attribute.Set) map[string]string {
		o := map[string]string{}
		for _, kv := range s.ToSlice() {
			o[string(kv.Key)] = kv.Value.String()
		}
		return o
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			units[m.Name] = m.Unit
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					out[key(m.Name, attrs(dp.Attributes))] = point{count: dp.Count, sum: dp.Sum,
						bounds: fmt.Sprint(dp.Bounds), counts: fmt.Sprint(dp.BucketCounts)}
				}
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					out[key(m.Name, attrs(dp.Attributes))] = point{value: dp.Value}
				}
			}
		}
	}
	return out, units
}

// driveTracker runs n requests through a real Tracker (the public otelstats
// API) with millisecond timings: some preempted, some aborted before their
// first token, some with prefix-cache hits.
func driveTracker(t *testing.T, n int, seed uint64) (ptrace.Traces, metricdata.ResourceMetrics) {
	return driveTrackerServing(t, n, seed, false)
}

// driveTrackerServing is driveTracker; with serving, requests also carry a
// P/D role (SPEC §7) and some a LoRA adapter (SPEC §9).
func driveTrackerServing(t *testing.T, n int, seed uint64, serving bool) (ptrace.Traces, metricdata.ResourceMetrics) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	res := resource.NewSchemaless(attribute.String("service.name", "engine-a"), attribute.String("service.instance.id", "a-1"))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithIDGenerator(spans.IDGenerator()), sdktrace.WithResource(res))
	tr, err := otelstats.NewTracker(otelstats.WithTracerProvider(tp),
		otelstats.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithResource(res))))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	for i := range n {
		id := fmt.Sprintf("req-%d", i)
		base := t0.Add(time.Duration(i) * 10 * time.Second)
		at := 0
		ms := func(d int) time.Time { at += d; return base.Add(time.Duration(at) * time.Millisecond) }
		rec := func(k otelstats.Kind, side otelstats.Side, tm time.Time, u otelstats.Update) {
			u.RequestID, u.Kind, u.Side, u.Time = id, k, side, tm
			if err := tr.Record(u); err != nil {
				t.Fatalf("%s %v: %v", id, k, err)
			}
		}
		model := []string{"llama-3-8b", "qwen-7b"}[i%2]
		arrived := otelstats.Update{Model: model, Operation: "chat"}
		if serving {
			arrived.PDRole = []string{"", otelstats.PDRolePrefill, otelstats.PDRoleDecode}[i%3]
			arrived.LoRAAdapter = []string{"", "", "sql-lora", "sql-lora"}[i%4]
		}
		rec(otelstats.KindArrived, otelstats.SideFrontend, ms(0), arrived)
		prompt := 20 + rng.IntN(200)
		rec(otelstats.KindInputProcessed, otelstats.SideFrontend, ms(1+rng.IntN(5)), otelstats.Update{NumPromptTokens: prompt})
		rec(otelstats.KindQueued, otelstats.SideEngine, ms(1+rng.IntN(3)), otelstats.Update{})
		cached := 0
		if i%3 == 0 {
			cached = prompt / 2
		}
		rec(otelstats.KindPrefilling, otelstats.SideEngine, ms(rng.IntN(400)), otelstats.Update{NumComputedTokens: prompt, NumCachedTokens: cached})
		if i%7 == 3 { // aborted before the first token
			rec(otelstats.KindFinished, otelstats.SideFrontend, ms(5+rng.IntN(50)), otelstats.Update{FinishReason: "abort"})
			rec(otelstats.KindFinished, otelstats.SideEngine, ms(1), otelstats.Update{FinishReason: "abort"})
			continue
		}
		out := 1 + rng.IntN(30)
		for j := range out {
			rec(otelstats.KindDecoding, otelstats.SideEngine, ms(5+rng.IntN(60)), otelstats.Update{NumNewTokens: 1})
			if i%5 == 1 && j == out/2 {
				rec(otelstats.KindPreempted, otelstats.SideEngine, ms(1), otelstats.Update{})
				rec(otelstats.KindPrefilling, otelstats.SideEngine, ms(10+rng.IntN(100)), otelstats.Update{NumComputedTokens: prompt + j + 1})
			}
		}
		reason := []string{"stop", "length"}[rng.IntN(2)]
		rec(otelstats.KindFinished, otelstats.SideEngine, ms(1), otelstats.Update{FinishReason: reason})
		rec(otelstats.KindFinished, otelstats.SideFrontend, ms(1+rng.IntN(3)), otelstats.Update{FinishReason: reason})
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	return spantest.FromSDK(rec.Ended()), rm
}

func runConnector(t *testing.T, cfg *Config, tds ...ptrace.Traces) pmetric.Metrics {
	t.Helper()
	sink := new(consumertest.MetricsSink)
	c, err := NewFactory().CreateTracesToMetrics(context.Background(), connectortest.NewNopSettings(Type), cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	for _, td := range tds {
		if err := c.ConsumeTraces(context.Background(), td); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Shutdown(context.Background()); err != nil { // the final flush
		t.Fatal(err)
	}
	all := sink.AllMetrics()
	if len(all) == 0 {
		t.Fatal("no metrics emitted")
	}
	return all[len(all)-1] // cumulative: the last is the total
}

// The connector, fed a tracker's spans, derives exactly the tracker's own
// metrics: same names, units, bucket boundaries, attributes, counts.
func TestConnectorMatchesTrackerMetrics(t *testing.T) {
	derived := map[string]bool{durationInstrument.name: true, requestsInstrument.name: true}
	for _, in := range histInstruments {
		derived[in.name] = true
	}
	for _, in := range counterInstruments {
		derived[in.name] = true
	}
	for _, serving := range []bool{false, true} {
		t.Run(fmt.Sprint("serving=", serving), func(t *testing.T) { matchTracker(t, serving, derived) })
	}
}

// matchTracker compares the connector's metrics of a tracker's spans with
// the tracker's own; with serving, requests carry P/D roles and adapters,
// which keep their series apart (SPEC §7, §9).
func matchTracker(t *testing.T, serving bool, derived map[string]bool) {
	td, rm := driveTrackerServing(t, 60, 7, serving)
	got, gotUnits := fromPdata(runConnector(t, createDefaultConfig().(*Config), td))
	want, wantUnits := fromSDK(rm)
	if len(got) < 20 {
		t.Fatalf("only %d series derived: %v", len(got), got)
	}
	for k, g := range got {
		name := k[:strings.IndexByte(k, '{')]
		if name == attributes.MetricReconstructClamped {
			t.Errorf("clamps counted on the tracker's consistent spans: %s = %+v", k, g)
			continue
		}
		w, ok := want[k]
		if !ok {
			t.Errorf("the connector has %s, the tracker does not", k)
			continue
		}
		if gotUnits[name] != wantUnits[name] {
			t.Errorf("%s unit %q, the tracker's %q", name, gotUnits[name], wantUnits[name])
		}
		if g.count != w.count || g.bounds != w.bounds || g.counts != w.counts || g.value != w.value || math.Abs(g.sum-w.sum) > 1e-6 {
			t.Errorf("%s:\n connector %+v\n tracker   %+v", k, g, w)
		}
	}
	for k := range want {
		name := k[:strings.IndexByte(k, '{')]
		if !derived[name] {
			continue // not derivable from one span per request (package doc)
		}
		if _, ok := got[k]; !ok {
			t.Errorf("the tracker has %s, the connector does not", k)
		}
	}
}

// Engine spans: one vLLM span becomes one request in every instrument,
// with the SPEC's durations of the rebuilt instants.
func TestConnectorVLLMSpans(t *testing.T) {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "vllm-b")
	rs.Resource().Attributes().PutStr("vllm.process_id", "123") // not a series key
	ss := rs.ScopeSpans().AppendEmpty()
	ss.Scope().SetName("vllm.llm_engine")
	spantest.VLLM(ss, pcommon.TraceID{1}, pcommon.SpanID{1}, t0, 0.3, 1.0, 0.05, 0.2, 0.6, 100, 11, "stop")
	spantest.VLLM(ss, pcommon.TraceID{2}, pcommon.SpanID{2}, t0, 0.012, 0.5, 0.001, 0.008, 0.4, 50, 1, "length")
	ab := spantest.VLLM(ss, pcommon.TraceID{3}, pcommon.SpanID{3}, t0, 0, 0.2, -5000.25, 0, 0, 50, 0, "abort") // never scheduled: vLLM's unset stamps
	ab.Status().SetCode(ptrace.StatusCodeError)
	got, _ := fromPdata(runConnector(t, createDefaultConfig().(*Config), td))
	for k, want := range map[string]point{
		"gen_ai.server.time_to_first_token{gen_ai.provider.name=vllm}":               {count: 2, sum: 0.312},
		"gen_ai.server.time_per_output_token{gen_ai.provider.name=vllm}":             {count: 1, sum: 0.07},
		"gen_ai.server.request.duration{gen_ai.provider.name=vllm}":                  {count: 2, sum: 1.5},
		"gen_ai.server.request.duration{error.type=abort,gen_ai.provider.name=vllm}": {count: 1, sum: 0.2},
		"llm.server.queue.duration{gen_ai.provider.name=vllm}":                       {count: 2, sum: 0.051},
		"llm.server.decode.duration{gen_ai.provider.name=vllm}":                      {count: 2, sum: 0.7 + 0.488},
		"llm.server.requests{gen_ai.provider.name=vllm,llm.finish_reason=abort}":     {value: 1},
		"llm.server.requests{gen_ai.provider.name=vllm,llm.finish_reason=stop}":      {value: 1},
		"llm.server.prompt_tokens{gen_ai.provider.name=vllm}":                        {value: 200},
		"llm.server.generation_tokens{gen_ai.provider.name=vllm}":                    {value: 12},
		"llm.reconstruct.clamped{gen_ai.provider.name=vllm}":                         {value: 1},
	} {
		g, ok := got[k]
		if !ok {
			t.Errorf("missing %s (have %v)", k, keys(got))
			continue
		}
		if g.count != want.count || g.value != want.value || math.Abs(g.sum-want.sum) > 1e-9 {
			t.Errorf("%s = %+v, want count %d sum %g value %d", k, g, want.count, want.sum, want.value)
		}
	}
	if _, ok := got["llm.server.prefix_cache.queries{gen_ai.provider.name=vllm}"]; ok {
		t.Error("prefix-cache queries counted without a cached-token count")
	}
}

func keys(s series) []string {
	var o []string
	for k := range s {
		o = append(o, k)
	}
	sort.Strings(o)
	return o
}

func TestConnectorBoundsCardinality(t *testing.T) {
	td := ptrace.NewTraces()
	ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
	for i := range 50 {
		sp := spantest.VLLM(ss, pcommon.TraceID{byte(i)}, pcommon.SpanID{byte(i)}, t0, 0.3, 1.0, 0.05, 0.2, 0.6, 10, 2, fmt.Sprintf("reason-%d", i))
		sp.Attributes().PutStr(string(attributes.RequestModel), fmt.Sprintf("model-%d", i))
	}
	cfg := createDefaultConfig().(*Config)
	cfg.Models, cfg.MaxSeries = []string{"model-1"}, 8
	got, _ := fromPdata(runConnector(t, cfg, td))
	overflow, models := 0, map[string]bool{}
	for k := range got {
		if strings.Contains(k, "otel.metric.overflow=true") {
			overflow++
		}
		for _, m := range []string{"model-1", "other"} {
			if strings.Contains(k, "gen_ai.request.model="+m+",") || strings.Contains(k, "gen_ai.request.model="+m+"}") {
				models[m] = true
			}
		}
		if strings.Contains(k, "model-2") {
			t.Errorf("a model outside the configured set kept its name: %s", k)
		}
	}
	if !models["other"] || !models["model-1"] || overflow == 0 {
		t.Errorf("models %v, overflow series %d; want model-1, other and overflow", models, overflow)
	}
	var total int64
	for k, p := range got {
		if strings.HasPrefix(k, attributes.MetricRequests+"{") {
			total += p.value
		}
	}
	if total != 50 {
		t.Errorf("requests counted %d, want all 50 (overflow keeps counting)", total)
	}
}

func TestConfigValidate(t *testing.T) {
	good := createDefaultConfig().(*Config)
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*Config){
		"zero interval":   func(c *Config) { c.FlushInterval = 0 },
		"no series":       func(c *Config) { c.MaxSeries = 0 },
		"negative model":  func(c *Config) { c.MaxModels = -1 },
		"unknown engine":  func(c *Config) { c.Engine = "ollama" },
		"forced llmtrace": func(c *Config) { c.Engine = "llmtrace" }, // would read engine spans with the SPEC's meanings
	} {
		c := *good
		mut(&c)
		if c.Validate() == nil {
			t.Errorf("%s: Validate accepted it", name)
		}
	}
}

// max_series bounds the series however many resources send spans: 200
// pods (service.instance.id, a default resource attribute) under
// max_series 3 fold into the first resources' series and one overflow
// resource, not an overflow set each.
func TestMaxSeriesAcrossResources(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	cfg.MaxSeries = 3
	td := ptrace.NewTraces()
	for i := range 200 {
		rs := td.ResourceSpans().AppendEmpty()
		rs.Resource().Attributes().PutStr("service.name", "vllm")
		rs.Resource().Attributes().PutStr("service.instance.id", fmt.Sprintf("pod-%d", i))
		spantest.VLLM(rs.ScopeSpans().AppendEmpty(), pcommon.TraceID{byte(i), 1}, pcommon.SpanID{byte(i), 1}, t0, 0.3, 1.0, 0.05, 0.2, 0.6, 10, 5, "stop")
	}
	md := runConnector(t, cfg, td)
	if n := md.ResourceMetrics().Len(); n > 2 {
		t.Errorf("%d resources, want at most 2 (the first pod's and one overflow)", n)
	}
	var requests int64
	rms := md.ResourceMetrics()
	for i := 0; i < rms.Len(); i++ {
		ms := rms.At(i).ScopeMetrics().At(0).Metrics()
		for j := 0; j < ms.Len(); j++ {
			if m := ms.At(j); m.Name() == attributes.MetricRequests {
				for k := 0; k < m.Sum().DataPoints().Len(); k++ {
					requests += m.Sum().DataPoints().At(k).IntValue()
				}
			}
		}
	}
	if requests != 200 {
		t.Errorf("%d requests counted, want all 200", requests)
	}
}

// No point ends before it started: a batch that starts a series after
// the flush's tick fired moves the flush's time to it.
func TestFlushNotBeforeStart(t *testing.T) {
	sink := new(consumertest.MetricsSink)
	c := newConnector(createDefaultConfig().(*Config), nil, sink, zap.NewNop())
	td := ptrace.NewTraces()
	spantest.VLLM(td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty(), pcommon.TraceID{1}, pcommon.SpanID{1}, t0, 0.3, 1.0, 0.05, 0.2, 0.6, 10, 5, "stop")
	c.consume(td, time.Unix(5, 0))
	c.flush(context.Background(), time.Unix(3, 0)) // the tick fired before the batch took the lock
	for _, md := range sink.AllMetrics() {
		rms := md.ResourceMetrics()
		for i := 0; i < rms.Len(); i++ {
			ms := rms.At(i).ScopeMetrics().At(0).Metrics()
			for j := 0; j < ms.Len(); j++ {
				m := ms.At(j)
				var start, end pcommon.Timestamp
				switch m.Type() {
				case pmetric.MetricTypeSum:
					p := m.Sum().DataPoints().At(0)
					start, end = p.StartTimestamp(), p.Timestamp()
				case pmetric.MetricTypeHistogram:
					p := m.Histogram().DataPoints().At(0)
					start, end = p.StartTimestamp(), p.Timestamp()
				default:
					continue
				}
				if start > end {
					t.Errorf("%s: start %v after its time %v", m.Name(), start, end)
				}
			}
		}
	}
}

// A forced engine is for engine spans: llmtrace's own roots carry the
// SPEC's meanings (time_in_queue from QUEUED, not from arrival) whatever
// the connector is told, so their metrics do not change with it.
func TestConnectorForcedEngineLeavesLLMTraceRoots(t *testing.T) {
	td, _ := driveTracker(t, 20, 3)
	auto, _ := fromPdata(runConnector(t, createDefaultConfig().(*Config), td))
	for _, engine := range []string{"vllm", "vllm-v0", "sglang", "tensorrt-llm"} {
		cfg := createDefaultConfig().(*Config)
		cfg.Engine = engine
		got, _ := fromPdata(runConnector(t, cfg, td))
		for k, w := range auto {
			if g := got[k]; g.count != w.count || g.value != w.value || g.counts != w.counts || math.Abs(g.sum-w.sum) > 1e-9 {
				t.Errorf("engine %s: %s = %+v, want %+v", engine, k, g, w)
			}
		}
		for k := range got {
			if _, ok := auto[k]; !ok {
				t.Errorf("engine %s: extra series %s", engine, k)
			}
		}
	}
}

// A model name earns its series only with a request that did not fail, as
// in the tracker: failed requests naming junk models (the engine does not
// serve them) cannot use up max_models before the real model finishes one.
func TestConnectorFailedRequestsDoNotAdmitModels(t *testing.T) {
	td := ptrace.NewTraces()
	ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
	for i := range 5 {
		sp := spantest.VLLM(ss, pcommon.TraceID{byte(i)}, pcommon.SpanID{byte(i)}, t0, 0, 0.01, 0, 0, 0, 10, 0, "error")
		sp.Attributes().PutStr(string(attributes.RequestModel), fmt.Sprintf("junk-%d", i))
	}
	sp := spantest.VLLM(ss, pcommon.TraceID{9}, pcommon.SpanID{9}, t0, 0.3, 1.0, 0.05, 0.2, 0.6, 10, 5, "stop")
	sp.Attributes().PutStr(string(attributes.RequestModel), "llama-3-8b")
	cfg := createDefaultConfig().(*Config)
	cfg.MaxModels = 2
	got, _ := fromPdata(runConnector(t, cfg, td))
	if _, ok := got["llm.server.requests{gen_ai.provider.name=vllm,gen_ai.request.model=llama-3-8b,llm.finish_reason=stop}"]; !ok {
		t.Errorf("the served model lost its name to failed junk: %v", keys(got))
	}
	if p := got["llm.server.requests{gen_ai.provider.name=vllm,gen_ai.request.model=other,llm.finish_reason=error}"]; p.value != 5 {
		t.Errorf("failed junk-model requests under other = %d, want 5: %v", p.value, keys(got))
	}
}

// blockingMetrics is a next consumer that holds every call until its
// context ends (an exporter retrying a backend that is down).
type blockingMetrics struct {
	consumertest.MetricsSink
	entered chan struct{}
}

func (b *blockingMetrics) ConsumeMetrics(ctx context.Context, md pmetric.Metrics) error {
	select {
	case b.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return ctx.Err()
}

// Shutdown ends a periodic flush stuck in the next consumer (its context
// is cancelled) rather than waiting on it forever, and leaves no goroutine.
func TestShutdownEndsAStuckFlush(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	cfg.FlushInterval = time.Millisecond
	next := &blockingMetrics{entered: make(chan struct{}, 1)}
	c := newConnector(cfg, nil, next, zap.NewNop())
	if err := c.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	td := ptrace.NewTraces()
	spantest.VLLM(td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty(), pcommon.TraceID{1}, pcommon.SpanID{1}, t0, 0.3, 1.0, 0.05, 0.2, 0.6, 10, 5, "stop")
	if err := c.ConsumeTraces(context.Background(), td); err != nil {
		t.Fatal(err)
	}
	<-next.entered // a periodic flush is stuck downstream
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the final flush gives up at once too
	done := make(chan error, 1)
	go func() { done <- c.Shutdown(ctx) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Shutdown waited on the stuck flush")
	}
}

// Free-form labels stay low-cardinality as in the tracker (SPEC §4): a
// producer inventing a finish reason, an error type, a provider or an operation per
// request gets a bounded set of names plus "other", not a series each that
// would use up max_series before the next real model arrives.
func TestConnectorBoundsFreeFormLabels(t *testing.T) {
	td := ptrace.NewTraces()
	ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
	for i := range 200 {
		sp := spantest.VLLM(ss, pcommon.TraceID{byte(i), 1}, pcommon.SpanID{byte(i), 1}, t0, 0.3, 1.0, 0.05, 0.2, 0.6, 10, 2, fmt.Sprintf("reason-%d", i))
		sp.Attributes().PutStr(string(attributes.OperationName), fmt.Sprintf("op-%d", i))
		sp.Attributes().PutStr(string(attributes.ErrorType), fmt.Sprintf("err-%d", i))
		sp.Attributes().PutStr(string(attributes.ProviderName), fmt.Sprintf("provider-%d", i))
	}
	got, _ := fromPdata(runConnector(t, createDefaultConfig().(*Config), td))
	distinct := map[string]map[string]bool{}
	for k := range got {
		for _, kv := range strings.Split(strings.TrimSuffix(k[strings.IndexByte(k, '{')+1:], "}"), ",") {
			if name, v, ok := strings.Cut(kv, "="); ok {
				if distinct[name] == nil {
					distinct[name] = map[string]bool{}
				}
				distinct[name][v] = true
			}
		}
	}
	for name, limit := range map[string]int{string(attributes.OperationName): 17, string(attributes.FinishReason): 17, string(attributes.ErrorType): 65,
		string(attributes.ProviderName): 17} {
		if n := len(distinct[name]); n > limit || !distinct[name][attributes.OtherModel] {
			t.Errorf("%s: %d distinct values (other: %v), want at most %d with other", name, n, distinct[name][attributes.OtherModel], limit)
		}
	}
}
