package otelstats_test

import (
	"context"
	"fmt"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/otelstats"
	"github.com/llmtrace/llmtrace/spans"
)

func printStats(s *otelstats.RequestStats) {
	ms := func(l otelstats.Latency) string {
		if !l.Valid {
			return "-"
		}
		return fmt.Sprint(l.Value.Milliseconds()) + "ms"
	}
	prompt := "?"
	if s.NumPromptTokens.Valid {
		prompt = fmt.Sprint(s.NumPromptTokens.N)
	}
	fmt.Printf("%s %s: ttft=%s tpot=%s queue=%s e2e=%s tokens=%s/%d preemptions=%d\n",
		s.RequestID, s.FinishReason, ms(s.FirstTokenLatency), ms(s.TimePerOutputToken),
		ms(s.QueueDuration), ms(s.E2ELatency), prompt, s.NumOutputTokens, s.NumPreemptions)
}

// A frontend records its side of a request through the handle Arrive
// returns; the engine's updates come through Record (or Step).
func ExampleTracker_Arrive() {
	ctx := context.Background()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithIDGenerator(spans.IDGenerator()))
	tr, err := otelstats.NewTracker(
		otelstats.WithTracerProvider(tp),
		otelstats.WithMeterProvider(sdkmetric.NewMeterProvider()),
		otelstats.WithOnFinish(printStats),
	)
	if err != nil {
		panic(err)
	}
	defer tr.Shutdown(ctx)

	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	engine := func(k otelstats.Kind, at, n int) {
		_ = tr.Record(otelstats.Update{RequestID: "req-1", Kind: k, Time: ms(at), NumComputedTokens: n, NumNewTokens: n})
	}

	q, _ := tr.Arrive(ctx, "req-1", otelstats.Arrival{Time: ms(0), Model: "llama-3-8b"})
	_ = q.InputProcessed(ms(2), 12, nil)
	engine(otelstats.KindQueued, 3, 0)
	engine(otelstats.KindPrefilling, 7, 12)
	for _, tok := range []int{25, 35, 45} {
		engine(otelstats.KindDecoding, tok, 1)
		_ = q.Detokenized(ms(tok+1), 1, 0)
	}
	_ = tr.Record(otelstats.Update{RequestID: "req-1", Kind: otelstats.KindFinished, Side: otelstats.SideEngine, Time: ms(45), FinishReason: "stop"})
	_ = q.Finish(ms(48), "stop")

	for _, s := range rec.Ended() {
		fmt.Printf("%-20s %2dms → %2dms\n", s.Name(), s.StartTime().Sub(t0).Milliseconds(), s.EndTime().Sub(t0).Milliseconds())
	}
	// Output:
	// req-1 stop: ttft=26ms tpot=11ms queue=4ms e2e=48ms tokens=12/3 preemptions=0
	// llm.input_processing  0ms →  2ms
	// llm.handoff           2ms →  3ms
	// llm.queue             3ms →  7ms
	// llm.prefill           7ms → 26ms
	// llm.decode           26ms → 45ms
	// llm.detokenize       26ms → 46ms
	// chat llama-3-8b       0ms → 48ms
}

// An engine loop records one Step per scheduler iteration for all its
// requests at once; slices can be reused between steps.
func ExampleTracker_Step() {
	ctx := context.Background()
	tr, err := otelstats.NewTracker(
		otelstats.WithTracerProvider(sdktrace.NewTracerProvider()),
		otelstats.WithMeterProvider(sdkmetric.NewMeterProvider()),
		otelstats.WithOnFinish(printStats),
	)
	if err != nil {
		panic(err)
	}
	defer tr.Shutdown(ctx)

	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	for _, id := range []string{"a", "b"} {
		// An engine-only setup: ARRIVED is the engine call.
		_ = tr.Record(otelstats.Update{RequestID: id, Kind: otelstats.KindArrived, Time: ms(0), Model: "m"})
	}

	var s otelstats.Step
	step := func(at int) {
		s.Time = ms(at)
		if err := tr.Step(&s); err != nil {
			fmt.Println(err)
		}
		s = otelstats.Step{Queued: s.Queued[:0], Preempted: s.Preempted[:0],
			Scheduled: s.Scheduled[:0], Decoded: s.Decoded[:0], Finished: s.Finished[:0]}
	}
	s.Queued = append(s.Queued, "a", "b")
	s.Scheduled = append(s.Scheduled, otelstats.Scheduled{RequestID: "a", ComputedTokens: 16})
	step(1)
	s.Scheduled = append(s.Scheduled, otelstats.Scheduled{RequestID: "b", ComputedTokens: 8, CachedTokens: 8})
	s.Decoded = append(s.Decoded, otelstats.Decoded{RequestID: "a"})
	step(11)
	s.Decoded = append(s.Decoded, otelstats.Decoded{RequestID: "a"}, otelstats.Decoded{RequestID: "b", NewTokens: 2})
	step(21)
	s.Preempted = append(s.Preempted, "a")
	s.Decoded = append(s.Decoded, otelstats.Decoded{RequestID: "b"})
	s.Finished = append(s.Finished, otelstats.Finished{RequestID: "b", Reason: "length"})
	step(31)
	s.Scheduled = append(s.Scheduled, otelstats.Scheduled{RequestID: "a", ComputedTokens: 18})
	s.Decoded = append(s.Decoded, otelstats.Decoded{RequestID: "a"})
	s.Finished = append(s.Finished, otelstats.Finished{RequestID: "a", Reason: "stop"})
	step(51)
	// Output:
	// b length: ttft=21ms tpot=5ms queue=10ms e2e=31ms tokens=?/3 preemptions=0
	// a stop: ttft=11ms tpot=20ms queue=0ms e2e=51ms tokens=?/3 preemptions=1
}

// The fast setup: an engine names its requests by handle in each Step, the
// finished span trees go straight to the span processor, and the latency
// histograms and counters are merged in an Aggregator that the metric
// reader collects.
func ExampleWithSpanProcessor() {
	ctx := context.Background()
	rec := tracetest.NewSpanRecorder() // stands in for a batch processor
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	agg := otelstats.NewAggregator()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader(sdkmetric.WithProducer(agg))))
	tr, err := otelstats.NewTracker(
		otelstats.WithTracerProvider(tp),
		otelstats.WithMeterProvider(mp),
		otelstats.WithAggregator(agg),
		otelstats.WithSpanProcessor(rec),
		otelstats.WithOnFinish(printStats),
	)
	if err != nil {
		panic(err)
	}
	defer tr.Shutdown(ctx)

	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	q, _ := tr.Arrive(ctx, "req-1", otelstats.Arrival{Time: ms(0), Model: "llama-3-8b"})
	_ = q.InputProcessed(ms(1), 12, nil)

	// The engine loop reuses one Step and names the request by its handle.
	step := &otelstats.Step{Time: ms(2), QueuedReqs: []*otelstats.Request{q}}
	_ = tr.Step(step)
	*step = otelstats.Step{Time: ms(5), Scheduled: []otelstats.Scheduled{{Req: q, ComputedTokens: 12}}}
	_ = tr.Step(step)
	for _, at := range []int{20, 30, 40} {
		*step = otelstats.Step{Time: ms(at), Decoded: []otelstats.Decoded{{Req: q}}}
		_ = tr.Step(step)
		_ = q.Detokenized(ms(at+1), 1, 0)
	}
	*step = otelstats.Step{Time: ms(40), Finished: []otelstats.Finished{{Req: q, Reason: otelstats.FinishStop}}}
	_ = tr.Step(step)
	_ = q.Finish(ms(42), otelstats.FinishStop)

	fmt.Println(len(rec.Ended()), "spans, no Tracer involved:", len(rec.Started()) == 0)
	// Output:
	// req-1 stop: ttft=21ms tpot=10ms queue=3ms e2e=42ms tokens=12/3 preemptions=0
	// 7 spans, no Tracer involved: true
}

// A head sampler decides when the request arrives, so the span context
// handed downstream (here the traceparent flag an engine would get)
// already says whether the trace is kept.
func ExampleWithHeadSampler() {
	ctx := context.Background()
	rec := tracetest.NewSpanRecorder() // stands in for a batch processor
	tr, err := otelstats.NewTracker(
		otelstats.WithTracerProvider(sdktrace.NewTracerProvider()),
		otelstats.WithSpanProcessor(rec),
		otelstats.WithHeadSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.5))),
		otelstats.WithOnFinish(func(s *otelstats.RequestStats) {
			fmt.Printf("%s: kept %v (%s)\n", s.RequestID, s.Sampled, s.SamplingReason)
		}),
	)
	if err != nil {
		panic(err)
	}
	defer tr.Shutdown(ctx)

	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// Trace ids chosen for the example: a ratio of 0.5 keeps the low half.
	for id, traceID := range map[string]string{"low": "0af7651916cd43dd1448eb211c80319c", "high": "0af7651916cd43ddf448eb211c80319c"} {
		tid, _ := trace.TraceIDFromHex(traceID)
		q, _ := tr.Arrive(ctx, id, otelstats.Arrival{Time: t0, Model: "m", TraceID: tid})
		fmt.Printf("%s: downstream sampled %v\n", id, q.SpanContext().IsSampled())
		_ = q.Finish(t0.Add(time.Millisecond), otelstats.FinishStop)
	}
	// Unordered output:
	// low: downstream sampled true
	// low: kept true (head)
	// high: downstream sampled false
	// high: kept false (dropped)
}
