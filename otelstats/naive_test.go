package otelstats_test

// The naive baseline: OpenTelemetry instrumentation written by hand, the way
// an engineer adds tracing to an inference engine without llmtrace. Every
// phase is a live span started and ended at the moment it happens, every
// output token is a span event plus an inter-token-latency histogram Record,
// and TTFT and e2e are histograms. It runs through the same SDK pipeline as
// the tracker's benchmarks (BatchSpanProcessor into a discarding exporter,
// metrics into a ManualReader), so one `go test -bench` run gives the ratio.
//
// It is written the way a careful engineer would: attribute sets for the
// metrics are built once per request (not per Record), and the request's
// context is passed to Record, as the OpenTelemetry docs show (which makes
// the SDK offer each measurement as an exemplar of the sampled span).

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/otelstats"
)

// naiveInst is the hand-written instrumentation's state for one process.
type naiveInst struct {
	tracer         trace.Tracer
	ttft, itl, e2e metric.Float64Histogram
}

func newNaive(tb testing.TB, tp trace.TracerProvider, mp metric.MeterProvider) *naiveInst {
	tb.Helper()
	m := mp.Meter("naive")
	n := &naiveInst{tracer: tp.Tracer("naive")}
	var err error
	hist := func(name string, bounds []float64) metric.Float64Histogram {
		h, e := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(bounds...))
		if e != nil {
			err = e
		}
		return h
	}
	n.ttft = hist(attributes.MetricTimeToFirstToken, attributes.TimeToFirstTokenBuckets())
	n.itl = hist(attributes.MetricInterTokenLatency, attributes.InterTokenLatencyBuckets())
	n.e2e = hist(attributes.MetricRequestDuration, attributes.RequestDurationBuckets())
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// naiveRequest is one in-flight request of the naive instrumentation: a live
// root span, the live span of the current phase (queue or prefill chunk) and
// the live decode span that collects one event per token.
type naiveRequest struct {
	n         *naiveInst
	ctx       context.Context // carries the root span
	root      trace.Span
	phase     trace.Span // queue or prefill chunk, nil between phases
	decodeCtx context.Context
	decode    trace.Span // nil outside decoding
	attrs     metric.MeasurementOption
	arrived   time.Time
	last      time.Time
	tokens    int
}

func (n *naiveInst) arrive(ctx context.Context, id, model string) *naiveRequest {
	ctx, root := n.tracer.Start(ctx, attributes.RootSpanName("chat", model),
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(
			attributes.OperationName.String("chat"),
			attributes.RequestModel.String(model),
			attributes.RequestID.String(id),
		))
	return &naiveRequest{
		n: n, ctx: ctx, root: root, arrived: time.Now(),
		attrs: metric.WithAttributeSet(attribute.NewSet(
			attributes.OperationName.String("chat"), attributes.RequestModel.String(model))),
	}
}

func (q *naiveRequest) endPhase() {
	if q.phase != nil {
		q.phase.End()
		q.phase = nil
	}
}

// queued starts a queue span: a new request waiting, or a preempted one.
func (q *naiveRequest) queued(reason string) {
	q.endPhase()
	_, q.phase = q.n.tracer.Start(q.ctx, attributes.SpanQueue,
		trace.WithAttributes(attributes.QueueReason.String(reason)))
}

// prefillChunk ends the current phase and starts a span for one prefill
// chunk (or a recompute).
func (q *naiveRequest) prefillChunk(computed, cached int) {
	q.endPhase()
	_, q.phase = q.n.tracer.Start(q.ctx, attributes.SpanPrefill,
		trace.WithAttributes(
			attributes.PrefillComputedTokens.Int(computed),
			attributes.PrefillCachedTokens.Int(cached),
		))
}

// token records one output token: a span event on the decode span (started
// at the first token of a segment) and a TTFT or ITL histogram Record.
func (q *naiveRequest) token() {
	now := time.Now()
	if q.decode == nil {
		q.endPhase()
		q.decodeCtx, q.decode = q.n.tracer.Start(q.ctx, attributes.SpanDecode)
	}
	q.decode.AddEvent("token")
	if q.tokens == 0 {
		q.n.ttft.Record(q.decodeCtx, now.Sub(q.arrived).Seconds(), q.attrs)
	} else {
		q.n.itl.Record(q.decodeCtx, now.Sub(q.last).Seconds(), q.attrs)
	}
	q.tokens++
	q.last = now
}

// endDecode ends the decode span (preemption, or the end of a segment).
func (q *naiveRequest) endDecode() {
	if q.decode != nil {
		q.decode.SetAttributes(attributes.DecodeOutputTokens.Int(q.tokens))
		q.decode.End()
		q.decode = nil
	}
}

func (q *naiveRequest) preempted() {
	q.endDecode()
	q.queued("preempted")
}

func (q *naiveRequest) finish(reason string) {
	q.endPhase()
	q.endDecode()
	q.root.SetAttributes(
		attributes.UsageOutputTokens.Int(q.tokens),
		attributes.FinishReasons.StringSlice([]string{reason}),
	)
	q.n.e2e.Record(q.ctx, time.Since(q.arrived).Seconds(), q.attrs)
	q.root.End()
}

// naiveBenchRequest is one whole request of the request benchmarks, the
// naive way: 512 prompt tokens in 2 prefill chunks, 128 output tokens, a
// recompute preemption, 128 more output tokens, finish.
func naiveBenchRequest(n *naiveInst, id string) {
	q := n.arrive(context.Background(), id, benchModel)
	q.queued("new")
	q.prefillChunk(benchPromptTokens/2, 0)
	q.prefillChunk(benchPromptTokens, 0)
	for range benchOutputTokens / 2 {
		q.token()
	}
	q.preempted()
	q.prefillChunk(benchPromptTokens+benchOutputTokens/2, 0)
	for range benchOutputTokens - benchOutputTokens/2 {
		q.token()
	}
	q.finish(otelstats.FinishStop)
}

// TestNaiveLosesTokenEvents checks the claim that the naive way silently
// loses token events past the SDK's default of 128 events per span, while
// the tracker accounts for every token of the same request.
func TestNaiveLosesTokenEvents(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) }()

	// One decode segment of 256 tokens, no preemption.
	n := newNaive(t, tp, mp)
	q := n.arrive(context.Background(), "r", benchModel)
	q.queued("new")
	q.prefillChunk(benchPromptTokens, 0)
	after := make([]time.Time, benchOutputTokens) // just after each token was recorded
	for i := range benchOutputTokens {
		q.token()
		after[i] = time.Now()
	}
	q.finish(otelstats.FinishStop)

	var dec sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == attributes.SpanDecode {
			dec = s
		}
	}
	if dec == nil {
		t.Fatal("no decode span")
	}
	kept, dropped := len(dec.Events()), dec.DroppedEvents()
	t.Logf("naive decode span of %d tokens: %d token events kept, %d dropped (SDK default EventCountLimit %d)",
		benchOutputTokens, kept, dropped, sdktrace.DefaultEventCountLimit)
	if kept != sdktrace.DefaultEventCountLimit || kept+dropped != benchOutputTokens {
		t.Fatalf("kept %d, dropped %d token events of %d; want %d kept", kept, dropped, benchOutputTokens, sdktrace.DefaultEventCountLimit)
	}
	// The SDK evicts the oldest events: what is lost is the start of the
	// decode, including the first token's event (the TTFT instant).
	// Event i was added before after[i] and after after[i-1].
	if first := dec.Events()[0].Time; !first.After(after[dropped-1]) || first.After(after[dropped]) {
		t.Fatalf("first kept event at %v is not token %d's", first, dropped+1)
	}
	t.Logf("the kept events are tokens %d..%d: tokens 1..%d, including the first token's event, are gone",
		dropped+1, benchOutputTokens, dropped)

	// The tracker: the same request keeps all 256 tokens (as counts, ITL
	// histogram and span attributes) without any per-token event.
	rec2 := tracetest.NewSpanRecorder()
	tp2 := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec2))
	reader2 := sdkmetric.NewManualReader()
	mp2 := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader2))
	var stats []otelstats.RequestStats
	tr, err := otelstats.NewTracker(otelstats.WithTracerProvider(tp2), otelstats.WithMeterProvider(mp2),
		otelstats.WithOnFinish(func(s *otelstats.RequestStats) { stats = append(stats, *s) }))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr.Shutdown(context.Background()) }()
	clk := newBenchClock(time.Now(), time.Millisecond)
	e := newBenchEngine(t, tr, clk)
	e.arrive(t, "r")
	e.prefill(t, benchPromptTokens)
	for range benchOutputTokens {
		e.decodeDeliver(t)
	}
	e.finish(t)
	if len(stats) != 1 || stats[0].NumOutputTokens != benchOutputTokens {
		t.Fatalf("tracker stats %+v, want %d output tokens", stats, benchOutputTokens)
	}
	var rm metricdata.ResourceMetrics
	if err := reader2.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var itl uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == attributes.MetricInterTokenLatency {
				for _, p := range m.Data.(metricdata.Histogram[float64]).DataPoints {
					itl += p.Count
				}
			}
		}
	}
	if itl != benchOutputTokens-1 {
		t.Fatalf("tracker ITL count %d, want %d", itl, benchOutputTokens-1)
	}
	t.Logf("tracker: %d output tokens and %d ITL gaps recorded, %d spans", stats[0].NumOutputTokens, itl, len(rec2.Ended()))
}
