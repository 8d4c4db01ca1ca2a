package otelstats_test

// Benchmarks of the tracker, each beside its naive twin (naive_test.go), so
// one run gives the ratio:
//
//	go test -run='^$' -bench=. -benchmem -count=6 ./otelstats
//
// See BENCHMARKS.md at the repository root for results and targets. Every
// benchmark also runs for one iteration in a few seconds (-benchtime=1x),
// which is how CI keeps them compiling and correct: the tracker's side fails
// the benchmark on any rejected update.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/otelstats"
	"github.com/llmtrace/llmtrace/spans"
)

const (
	benchModel        = "llama-3-8b"
	benchPromptTokens = 512 // in 2 prefill chunks in the request benchmarks
	benchOutputTokens = 256
	benchBatch        = 256 // requests decoding in each step of the token benchmarks
	benchMemRequests  = 512 // requests held in flight by the memory benchmarks
	// benchNaiveMemRequests is fewer: past 128 tokens every naive token
	// event moves the span's 127 others (the SDK evicts the oldest), which
	// makes 512 requests of 2048 tokens take many seconds; 128 naive
	// requests hold megabytes, plenty for a per-request figure.
	benchNaiveMemRequests = 128
	// benchEngineTick is the simulated time between engine steps where the
	// benchmarks use a simulated clock: a decode step of a 256-request
	// batch. It sets how often the tracker sweeps (once per second of
	// recorded time), as it would in production.
	benchEngineTick = 20 * time.Millisecond
)

// benchIDs are vLLM-like request ids ("chatcmpl-" and 32 hex digits), made
// once so that neither side pays for them in the timed loop.
var benchIDs = func() []string {
	ids := make([]string, 4096)
	for i := range ids {
		h := sha256.Sum256([]byte(strconv.Itoa(i)))
		ids[i] = "chatcmpl-" + hex.EncodeToString(h[:16])
	}
	return ids
}()

// benchDiscardExporter is a span exporter that drops everything, counting spans.
type benchDiscardExporter struct{ spans atomic.Int64 }

func (e *benchDiscardExporter) ExportSpans(_ context.Context, s []sdktrace.ReadOnlySpan) error {
	e.spans.Add(int64(len(s)))
	return nil
}

func (e *benchDiscardExporter) Shutdown(context.Context) error { return nil }

// benchPipeline is the SDK setup both sides run through: a TracerProvider with a
// BatchSpanProcessor (SDK defaults) into a discarding exporter, and a
// MeterProvider with a ManualReader that is never collected in the timed
// loop.
type benchPipeline struct {
	tp     *sdktrace.TracerProvider
	mp     *sdkmetric.MeterProvider
	reader *sdkmetric.ManualReader
	exp    *benchDiscardExporter
	bsp    sdktrace.SpanProcessor // the TracerProvider's BatchSpanProcessor
	agg    *otelstats.Aggregator  // the tracker's fast metrics path, or nil
	detail otelstats.Detail       // the tracker's detail level; 0 = default
	// direct hands the tracker's span trees straight to bsp
	// (otelstats.WithSpanProcessor) instead of through the Tracer.
	direct bool
	// keepNone is the tracker's own "sample nothing" policy, which the
	// direct path needs where the Tracer path has the SDK's NeverSample.
	keepNone bool
}

// benchConfig is a way to set the tracker up, from the fastest (what
// otelconf.TrackerOptions and the README's setup give) to the plainest.
type benchConfig int

const (
	benchFast         benchConfig = iota // Aggregator + WithSpanProcessor
	benchTracerPath                      // Aggregator, spans through the SDK Tracer
	benchNoAggregator                    // WithTracerProvider and WithMeterProvider only
)

// newBenchPipelineFor builds the pipeline of cfg; a NeverSample sampler
// also makes the tracker keep nothing on the direct path.
func newBenchPipelineFor(tb testing.TB, sampler sdktrace.Sampler, cfg benchConfig) *benchPipeline {
	var p *benchPipeline
	if cfg == benchNoAggregator {
		p = newBenchPipeline(tb, sampler, true)
	} else {
		p = newBenchPipelineAggregated(tb, sampler)
	}
	p.direct = cfg == benchFast
	p.keepNone = p.direct && sampler != nil
	return p
}

// newBenchPipeline builds a pipeline. A nil sampler is the SDK default
// (ParentBased(AlwaysSample)). ours adds the IDGenerator the tracker's docs
// ask for; the naive side keeps the SDK's.
func newBenchPipeline(tb testing.TB, sampler sdktrace.Sampler, ours bool) *benchPipeline {
	p := buildBenchPipeline(sampler, ours)
	tb.Cleanup(p.close)
	return p
}

// newBenchPipelineAggregated is newBenchPipeline for the tracker's fast
// metrics path: an otelstats.Aggregator registered with the reader as a
// Producer, which newBenchTracker hands to the tracker.
func newBenchPipelineAggregated(tb testing.TB, sampler sdktrace.Sampler) *benchPipeline {
	agg := otelstats.NewAggregator()
	p := buildBenchPipelineReader(sampler, true, sdkmetric.NewManualReader(sdkmetric.WithProducer(agg)))
	p.agg = agg
	tb.Cleanup(p.close)
	return p
}

// buildBenchPipeline is newBenchPipeline without the cleanup; the caller closes it.
func buildBenchPipeline(sampler sdktrace.Sampler, ours bool) *benchPipeline {
	return buildBenchPipelineReader(sampler, ours, sdkmetric.NewManualReader())
}

func buildBenchPipelineReader(sampler sdktrace.Sampler, ours bool, reader *sdkmetric.ManualReader) *benchPipeline {
	return buildBenchPipelineQueue(sampler, ours, reader, 0)
}

// buildBenchPipelineQueue sets the BatchSpanProcessor's queue size (0: the
// SDK's default, 2048).
func buildBenchPipelineQueue(sampler sdktrace.Sampler, ours bool, reader *sdkmetric.ManualReader, queue int) *benchPipeline {
	p := &benchPipeline{reader: reader, exp: &benchDiscardExporter{}}
	var bopts []sdktrace.BatchSpanProcessorOption
	if queue > 0 {
		bopts = append(bopts, sdktrace.WithMaxQueueSize(queue))
	}
	p.bsp = sdktrace.NewBatchSpanProcessor(p.exp, bopts...)
	opts := []sdktrace.TracerProviderOption{sdktrace.WithSpanProcessor(p.bsp)}
	if sampler != nil {
		opts = append(opts, sdktrace.WithSampler(sampler))
	}
	if ours {
		opts = append(opts, sdktrace.WithIDGenerator(spans.IDGenerator()))
	}
	p.tp = sdktrace.NewTracerProvider(opts...)
	p.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(p.reader))
	return p
}

func (p *benchPipeline) close() {
	ctx := context.Background()
	_ = p.tp.Shutdown(ctx)
	_ = p.mp.Shutdown(ctx)
}

// spansPerOp flushes the batch processor and reports the spans exported per
// op; fewer than the request's span count means the BatchSpanProcessor's
// queue overflowed and dropped spans.
func (p *benchPipeline) spansPerOp(b *testing.B) {
	if err := p.tp.ForceFlush(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(p.exp.spans.Load())/float64(b.N), "spans/op")
}

// newBenchTracker returns a tracker on p with its defaults (keep every
// trace, span tree detail) whatever the environment says. It is not shut
// down: benchmarks that leave requests in flight would otherwise finish
// them all in their cleanup, which costs a histogram Record per token of
// each (see BENCHMARKS.md) and makes a run last minutes longer, outside the
// timed loop. It starts no goroutine, so dropping it leaks nothing.
func newBenchTracker(tb testing.TB, p *benchPipeline) *otelstats.Tracker {
	tb.Helper()
	opts := []otelstats.Option{otelstats.WithTracerProvider(p.tp), otelstats.WithMeterProvider(p.mp)}
	if p.agg != nil {
		opts = append(opts, otelstats.WithAggregator(p.agg))
	}
	if p.detail != otelstats.DetailInherit {
		opts = append(opts, otelstats.WithDetail(p.detail))
	}
	if p.direct {
		opts = append(opts, otelstats.WithSpanProcessor(p.bsp))
	}
	if p.keepNone {
		opts = append(opts, otelstats.WithSampling(&otelstats.SamplingPolicy{}))
	}
	tr, err := otelstats.NewTracker(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return tr
}

// benchCPU measures the process's CPU time (every thread: the recording
// goroutine, the BatchSpanProcessor's, the GC) over a benchmark's timed
// loop and reports it per op as cpu-ns/op. On a shared, loaded machine
// wall-clock ns/op counts the time the benchmark was not even running;
// CPU time does not, so it is the steadier figure there.
type benchCPU int64

func startBenchCPU() benchCPU { return benchCPU(benchCPUTime()) }

func (c benchCPU) report(b *testing.B) {
	end := benchCPUTime()
	if c < 0 || end < 0 || b.N == 0 {
		return
	}
	b.ReportMetric(float64(end-int64(c))/float64(b.N), "cpu-ns/op")
}

// benchClock gives the benchmarks' times: the real clock (time.Now, what a
// frontend or engine calls), or a simulated one that advances by tick per
// engine step.
type benchClock struct {
	real bool
	ns   int64 // simulated: Unix nanoseconds of the current step
	t    time.Time
	tick time.Duration
}

func newBenchClock(start time.Time, tick time.Duration) *benchClock {
	return &benchClock{ns: start.UnixNano(), t: start.Round(0), tick: tick}
}

func realBenchClock() *benchClock { return &benchClock{real: true} }

// step is the time of a new engine step.
func (c *benchClock) step() time.Time {
	if c.real {
		return time.Now()
	}
	// An engine's step time: an integer clock turned into a time.Time,
	// cheaper than time.Time.Add's monotonic bookkeeping.
	c.ns += int64(c.tick)
	c.t = time.Unix(0, c.ns)
	return c.t
}

// now is the time of a frontend update within the current step.
func (c *benchClock) now() time.Time {
	if c.real {
		return time.Now()
	}
	return c.t
}

// benchEngine drives a set of in-flight requests through the tracker the way an
// engine loop and its frontend would: one reused Step value per engine step,
// and the frontend's Request handles for arrival, input processing,
// detokenization and finish. Once its slices have grown, it allocates
// nothing.
//
// Step entries name requests by handle, as an engine that keeps the handle
// with its request object does; with byID they name them by id.
type benchEngine struct {
	tr    *otelstats.Tracker
	clk   *benchClock
	byID  bool
	ids   []string
	reqs  []*otelstats.Request
	step  otelstats.Step
	sched []otelstats.Scheduled
	dec   []otelstats.Decoded
	fin   []otelstats.Finished
}

func newBenchEngine(tb testing.TB, tr *otelstats.Tracker, clk *benchClock) *benchEngine {
	return &benchEngine{tr: tr, clk: clk}
}

// arrive records ARRIVED and INPUT_PROCESSED for ids, which become the
// engine's requests.
func (e *benchEngine) arrive(tb testing.TB, ids ...string) {
	e.ids = ids
	e.reqs, e.sched, e.dec, e.fin = e.reqs[:0], e.sched[:0], e.dec[:0], e.fin[:0]
	for _, id := range ids {
		t := e.clk.now()
		q, err := e.tr.Arrive(context.Background(), id, otelstats.Arrival{Time: t, Model: benchModel})
		if err != nil {
			tb.Fatal(err)
		}
		if err := q.InputProcessed(t, benchPromptTokens, nil); err != nil {
			tb.Fatal(err)
		}
		e.reqs = append(e.reqs, q)
		h := q
		if e.byID {
			h = nil
		}
		e.sched = append(e.sched, otelstats.Scheduled{Req: h, RequestID: id})
		e.dec = append(e.dec, otelstats.Decoded{Req: h, RequestID: id, NewTokens: 1})
		e.fin = append(e.fin, otelstats.Finished{Req: h, RequestID: id, Reason: otelstats.FinishStop})
	}
}

// queued and preempted name all the engine's requests, by handle or id.
func (e *benchEngine) queued() *otelstats.Step {
	st := e.reset()
	if e.byID {
		st.Queued = e.ids
	} else {
		st.QueuedReqs = e.reqs
	}
	return st
}

func (e *benchEngine) preempted() *otelstats.Step {
	st := e.reset()
	if e.byID {
		st.Preempted = e.ids
	} else {
		st.PreemptedReqs = e.reqs
	}
	return st
}

// record records a step with s's entries in the engine's one reused Step
// value.
func (e *benchEngine) record(tb testing.TB, s *otelstats.Step) {
	s.Time = e.clk.step()
	if err := e.tr.Step(s); err != nil {
		tb.Fatal(err)
	}
}

// reset empties the reused Step value for the next step and returns it.
func (e *benchEngine) reset() *otelstats.Step {
	st := &e.step
	st.Queued, st.QueuedReqs, st.Preempted, st.PreemptedReqs = st.Queued[:0], st.QueuedReqs[:0], st.Preempted[:0], st.PreemptedReqs[:0]
	st.Scheduled, st.Decoded, st.Finished = st.Scheduled[:0], st.Decoded[:0], st.Finished[:0]
	return st
}

// prefill queues the requests and schedules one prefill chunk per value of
// computed (the tokens computed once the chunk is done).
func (e *benchEngine) prefill(tb testing.TB, computed ...int) {
	e.record(tb, e.queued())
	for _, c := range computed {
		e.schedule(tb, c)
	}
}

func (e *benchEngine) schedule(tb testing.TB, computed int) {
	for i := range e.sched {
		e.sched[i].ComputedTokens = computed
	}
	st := e.reset()
	st.Scheduled = e.sched
	e.record(tb, st)
}

// decode is one engine step in which the first n requests produce a token.
func (e *benchEngine) decode(tb testing.TB, n int) {
	st := e.reset()
	st.Decoded = e.dec[:n]
	e.record(tb, st)
}

// deliver is the frontend delivering one token of every request.
func (e *benchEngine) deliver(tb testing.TB) {
	for _, q := range e.reqs {
		if err := q.Detokenized(e.clk.now(), 1, 0); err != nil {
			tb.Fatal(err)
		}
	}
}

func (e *benchEngine) decodeDeliver(tb testing.TB) {
	e.decode(tb, len(e.dec))
	e.deliver(tb)
}

func (e *benchEngine) preempt(tb testing.TB) { e.record(tb, e.preempted()) }

// finish finishes every request on both sides.
func (e *benchEngine) finish(tb testing.TB) {
	st := e.reset()
	st.Finished = e.fin
	e.record(tb, st)
	for _, q := range e.reqs {
		if err := q.Finish(e.clk.now(), otelstats.FinishStop); err != nil {
			tb.Fatal(err)
		}
	}
}

// benchRequest drives the engine's requests through the request
// benchmarks' life: 512 prompt tokens in 2 prefill chunks, 128 output
// tokens, a recompute preemption, 128 more, finish; every token decoded by
// the engine and detokenized by the frontend.
func (e *benchEngine) benchRequest(tb testing.TB) {
	e.prefill(tb, benchPromptTokens/2, benchPromptTokens)
	for range benchOutputTokens / 2 {
		e.decodeDeliver(tb)
	}
	e.preempt(tb)
	e.schedule(tb, benchPromptTokens+benchOutputTokens/2)
	for range benchOutputTokens - benchOutputTokens/2 {
		e.decodeDeliver(tb)
	}
	e.finish(tb)
}

// TestBenchScenarios checks that the request benchmarks' scenario is what
// they claim on both sides: every update accepted, the span trees, the
// token counts.
func TestBenchScenarios(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithIDGenerator(spans.IDGenerator()))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) }()
	var stats []otelstats.RequestStats
	tr, err := otelstats.NewTracker(otelstats.WithTracerProvider(tp), otelstats.WithMeterProvider(mp),
		otelstats.WithOnFinish(func(s *otelstats.RequestStats) { stats = append(stats, *s) }))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr.Shutdown(context.Background()) }()
	e := newBenchEngine(t, tr, realBenchClock())
	e.arrive(t, benchIDs[0])
	e.benchRequest(t)
	if len(stats) != 1 {
		t.Fatalf("%d requests finished, want 1", len(stats))
	}
	s := stats[0]
	if s.NumOutputTokens != benchOutputTokens || s.NumPreemptions != 1 || s.NumPromptTokens.N != benchPromptTokens {
		t.Fatalf("stats: %d output tokens, %d preemptions, %d prompt tokens", s.NumOutputTokens, s.NumPreemptions, s.NumPromptTokens.N)
	}
	names := map[string]int{}
	for _, sp := range rec.Ended() {
		names[sp.Name()]++
	}
	want := map[string]int{
		attributes.RootSpanName("chat", benchModel): 1, attributes.SpanInputProcessing: 1, attributes.SpanQueue: 2,
		attributes.SpanPrefill: 2, attributes.SpanDecode: 2, attributes.SpanDetokenize: 1,
	}
	for k, v := range want {
		if names[k] != v {
			t.Errorf("tracker: %d %q spans, want %d (all: %v)", names[k], k, v, names)
		}
	}
	t.Logf("tracker: %d spans %v", len(rec.Ended()), names)

	rec2 := tracetest.NewSpanRecorder()
	tp2 := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec2))
	defer func() { _ = tp2.Shutdown(context.Background()) }()
	naiveBenchRequest(newNaive(t, tp2, mp), benchIDs[0])
	names = map[string]int{}
	events := 0
	for _, sp := range rec2.Ended() {
		names[sp.Name()]++
		events += len(sp.Events())
	}
	if names[attributes.SpanPrefill] != 3 || names[attributes.SpanDecode] != 2 || names[attributes.SpanQueue] != 2 || events != benchOutputTokens {
		t.Errorf("naive: spans %v, %d token events", names, events)
	}
	t.Logf("naive: %d spans %v, %d token events", len(rec2.Ended()), names, events)
}

// TestBenchAggregatedPipeline checks the aggregated benchmarks' wiring: the
// inter-token latency histogram reaches the reader through the Aggregator,
// once, with every gap of the request.
func TestBenchAggregatedPipeline(t *testing.T) {
	p := newBenchPipelineAggregated(t, nil)
	tr := newBenchTracker(t, p)
	e := newBenchEngine(t, tr, realBenchClock())
	e.arrive(t, benchIDs[0])
	e.benchRequest(t)
	var rm metricdata.ResourceMetrics
	if err := p.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var series int
	var gaps uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != attributes.MetricInterTokenLatency {
				continue
			}
			series++
			for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
				gaps += dp.Count
			}
		}
	}
	if series != 1 || gaps != benchOutputTokens-1 {
		t.Fatalf("%s: %d series with %d gaps, want 1 with %d", attributes.MetricInterTokenLatency, series, gaps, benchOutputTokens-1)
	}
}

// Per token ---------------------------------------------------------------

// BenchmarkNaiveToken: one op is one output token the naive way — a span
// event on the request's live decode span and an ITL histogram Record — for
// 256 requests in flight, round-robin as an engine step visits them. Each
// decode span holds one request's 256 tokens and is then ended and a new one
// started (so half of the events hit the SDK's 128-event limit, as in a real
// 256-token request; span start and end are amortized over its tokens).
func BenchmarkNaiveToken(b *testing.B) {
	p := newBenchPipeline(b, nil, false)
	qs := naiveBatch(newNaive(b, p.tp, p.mp), benchBatch)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := startBenchCPU()
	for i := range b.N {
		q := qs[i%benchBatch]
		q.token()
		if q.tokens%benchOutputTokens == 0 {
			q.endDecode()
		}
	}
	cpu.report(b)
}

// naiveBatch starts n naive requests and brings them to decoding.
func naiveBatch(n *naiveInst, count int) []*naiveRequest {
	qs := make([]*naiveRequest, count)
	for i := range qs {
		q := n.arrive(context.Background(), benchIDs[i], benchModel)
		q.queued("new")
		q.prefillChunk(benchPromptTokens, 0)
		qs[i] = q
	}
	return qs
}

// BenchmarkStepToken: one op is one output token recorded through
// Tracker.Step, with 256 requests in flight decoding one token each per step
// and one Step value reused.
func BenchmarkStepToken(b *testing.B) { benchStepToken(b, false) }

// BenchmarkStepTokenByID: the same with the step's entries naming requests by
// id (an engine that does not keep the handles, e.g. one fed through the
// update log or another process): each entry hashes and looks its id up.
func BenchmarkStepTokenByID(b *testing.B) { benchStepToken(b, true) }

func benchStepToken(b *testing.B, byID bool) {
	tr := newBenchTracker(b, newBenchPipeline(b, nil, true))
	e := newBenchEngine(b, tr, newBenchClock(time.Now(), benchEngineTick))
	e.byID = byID
	e.arrive(b, benchIDs[:benchBatch]...)
	e.prefill(b, benchPromptTokens)
	e.decode(b, benchBatch) // first tokens
	b.ReportAllocs()
	b.ResetTimer()
	cpu := startBenchCPU()
	for done := 0; done < b.N; {
		n := min(benchBatch, b.N-done)
		e.decode(b, n)
		done += n
	}
	cpu.report(b)
}

// Per engine step ---------------------------------------------------------

// BenchmarkNaiveStep1024: one op is one engine step of 1024 running requests
// each producing one token, the naive way.
func BenchmarkNaiveStep1024(b *testing.B) {
	p := newBenchPipeline(b, nil, false)
	qs := naiveBatch(newNaive(b, p.tp, p.mp), 1024)
	b.ReportAllocs()
	cpu := startBenchCPU()
	for b.Loop() {
		for _, q := range qs {
			q.token()
			if q.tokens%benchOutputTokens == 0 {
				q.endDecode()
			}
		}
	}
	cpu.report(b)
}

// BenchmarkStep1024: one op is one Tracker.Step with 1024 running requests
// each decoding one token.
func BenchmarkStep1024(b *testing.B) {
	tr := newBenchTracker(b, newBenchPipeline(b, nil, true))
	e := newBenchEngine(b, tr, newBenchClock(time.Now(), benchEngineTick))
	e.arrive(b, benchIDs[:1024]...)
	e.prefill(b, benchPromptTokens)
	e.decode(b, 1024)
	b.ReportAllocs()
	cpu := startBenchCPU()
	for b.Loop() {
		e.decode(b, 1024)
	}
	cpu.report(b)
}

// Per request -------------------------------------------------------------

func benchNaiveRequest(b *testing.B, sampler sdktrace.Sampler) {
	p := newBenchPipeline(b, sampler, false)
	n := newNaive(b, p.tp, p.mp)
	b.ReportAllocs()
	i := 0
	cpu := startBenchCPU()
	for b.Loop() {
		naiveBenchRequest(n, benchIDs[i%len(benchIDs)])
		i++
	}
	cpu.report(b)
	b.StopTimer()
	p.spansPerOp(b)
}

func benchRequest(b *testing.B, sampler sdktrace.Sampler, cfg benchConfig) {
	benchRequestOn(b, newBenchPipelineFor(b, sampler, cfg))
}

// benchRequestOn runs whole requests through a tracker on p, every update
// stamped with time.Now().
func benchRequestOn(b *testing.B, p *benchPipeline) {
	benchRequestClock(b, p, realBenchClock())
}

func benchRequestClock(b *testing.B, p *benchPipeline, clk *benchClock) {
	e := newBenchEngine(b, newBenchTracker(b, p), clk)
	b.ReportAllocs()
	i := 0
	cpu := startBenchCPU()
	for b.Loop() {
		j := i % len(benchIDs)
		e.arrive(b, benchIDs[j:j+1]...)
		e.benchRequest(b)
		i++
	}
	cpu.report(b)
	b.StopTimer()
	p.spansPerOp(b)
}

// BenchmarkRequestDetail: the whole request of BenchmarkRequest at each
// detail level (0 = root span only … 3 = per-token offsets), for the
// README's cost table.
func BenchmarkRequestDetail(b *testing.B) {
	for lvl := otelstats.DetailRoot; lvl <= otelstats.DetailTokens; lvl++ {
		b.Run(fmt.Sprintf("level=%d", int(lvl)-1), func(b *testing.B) {
			p := newBenchPipelineFor(b, nil, benchFast)
			p.detail = lvl
			benchRequestOn(b, p)
		})
	}
}

// BenchmarkNaiveRequest: one op is one whole request the naive way: 512
// prompt tokens in 2 prefill chunks, 256 output tokens with a recompute
// preemption in the middle, live spans per phase, an event and a histogram
// Record per token.
func BenchmarkNaiveRequest(b *testing.B) { benchNaiveRequest(b, nil) }

// BenchmarkRequest: one op is the same request through the tracker — the
// frontend's handle (arrival, input processing, a delivery per token,
// finish) and the engine's Steps naming it by handle (queue, 2 chunks, a
// decode per token, preemption, recompute, finish) — times from the real
// clock, one request per step. Set up as otelconf.TrackerOptions does:
// span trees handed to the TracerProvider's BatchSpanProcessor
// (WithSpanProcessor), latency histograms through an Aggregator registered
// with the ManualReader.
func BenchmarkRequest(b *testing.B) { benchRequest(b, nil, benchFast) }

// BenchmarkRequestGivenTimes is BenchmarkRequest with the times given rather
// than read: each engine step has its time (a simulated 20 ms step clock, as
// in BenchmarkStepToken) and the frontend delivers at its step's time. It is
// the tracker's own cost, without the 2 clock reads per token its callers
// make in BenchmarkRequest (about 70 ns each on these VMs, see
// BenchmarkTimeNow) — reads an engine makes for its own scheduling and
// metrics whether or not it records anything.
func BenchmarkRequestGivenTimes(b *testing.B) {
	benchRequestClock(b, newBenchPipelineFor(b, nil, benchFast), newBenchClock(time.Now(), benchEngineTick))
}

// BenchmarkRequestUnsampledGivenTimes is BenchmarkRequestGivenTimes keeping
// no trace.
func BenchmarkRequestUnsampledGivenTimes(b *testing.B) {
	benchRequestClock(b, newBenchPipelineFor(b, sdktrace.NeverSample(), benchFast), newBenchClock(time.Now(), benchEngineTick))
}

// Per request, in batches --------------------------------------------------

// benchBatchQueue is the BatchSpanProcessor queue of the batched request
// benchmarks, on both sides: 256 requests finishing in one step end 2,304 of
// the tracker's spans at once (and the naive way ends 256 decode spans at
// once at the preemption), more than the SDK's default queue of 2,048
// holds; batch.NewProcessor's default is 16,384.
const benchBatchQueue = 16384

// BenchmarkNaiveRequestBatch: one op is one request of
// BenchmarkNaiveRequest, with 256 of them in flight in lockstep as an
// engine batches them: every phase and token of all 256 before the next.
func BenchmarkNaiveRequestBatch(b *testing.B) {
	p := buildBenchPipelineQueue(nil, false, sdkmetric.NewManualReader(), benchBatchQueue)
	b.Cleanup(p.close)
	n := newNaive(b, p.tp, p.mp)
	qs := make([]*naiveRequest, 0, benchBatch)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := startBenchCPU()
	for done := 0; done < b.N; {
		k := min(benchBatch, b.N-done)
		qs = naiveBenchBatch(n, benchIDs[:k], qs[:0])
		done += k
	}
	cpu.report(b)
	b.StopTimer()
	p.spansPerOp(b)
}

// naiveBenchBatch runs ids' requests through naiveBenchRequest's life in
// lockstep.
func naiveBenchBatch(n *naiveInst, ids []string, qs []*naiveRequest) []*naiveRequest {
	for _, id := range ids {
		q := n.arrive(context.Background(), id, benchModel)
		q.queued("new")
		qs = append(qs, q)
	}
	for _, c := range []int{benchPromptTokens / 2, benchPromptTokens} {
		for _, q := range qs {
			q.prefillChunk(c, 0)
		}
	}
	for range benchOutputTokens / 2 {
		for _, q := range qs {
			q.token()
		}
	}
	for _, q := range qs {
		q.preempted()
	}
	for _, q := range qs {
		q.prefillChunk(benchPromptTokens+benchOutputTokens/2, 0)
	}
	for range benchOutputTokens - benchOutputTokens/2 {
		for _, q := range qs {
			q.token()
		}
	}
	for _, q := range qs {
		q.finish(otelstats.FinishStop)
	}
	return qs
}

// BenchmarkRequestBatch: one op is one request of BenchmarkRequest, with 256
// of them in flight: each engine step carries all 256 (by handle), the
// engine reads the clock once per step, the frontend once per delivery.
func BenchmarkRequestBatch(b *testing.B) { benchRequestBatch(b, realBenchClock()) }

// BenchmarkRequestBatchGivenTimes is BenchmarkRequestBatch with the times
// given (a simulated step clock) rather than read.
func BenchmarkRequestBatchGivenTimes(b *testing.B) {
	benchRequestBatch(b, newBenchClock(time.Now(), benchEngineTick))
}

func benchRequestBatch(b *testing.B, clk *benchClock) {
	agg := otelstats.NewAggregator()
	p := buildBenchPipelineQueue(nil, true, sdkmetric.NewManualReader(sdkmetric.WithProducer(agg)), benchBatchQueue)
	b.Cleanup(p.close)
	p.agg, p.direct = agg, true
	e := newBenchEngine(b, newBenchTracker(b, p), clk)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := startBenchCPU()
	for done, j := 0, 0; done < b.N; j++ {
		k := min(benchBatch, b.N-done)
		start := j * benchBatch % len(benchIDs)
		e.arrive(b, benchIDs[start:start+k]...)
		e.benchRequest(b)
		done += k
	}
	cpu.report(b)
	b.StopTimer()
	p.spansPerOp(b)
}

// BenchmarkNaiveRequestUnsampled is BenchmarkNaiveRequest with NeverSample.
func BenchmarkNaiveRequestUnsampled(b *testing.B) { benchNaiveRequest(b, sdktrace.NeverSample()) }

// BenchmarkRequestUnsampled is BenchmarkRequest keeping no trace: metrics
// only. The SDK's NeverSample is on the TracerProvider, and the tracker's
// policy keeps nothing (the direct path does not consult the SDK sampler).
func BenchmarkRequestUnsampled(b *testing.B) { benchRequest(b, sdktrace.NeverSample(), benchFast) }

// BenchmarkRequestTracerPath is BenchmarkRequest with the span trees started
// and ended through the TracerProvider's Tracer (no WithSpanProcessor).
func BenchmarkRequestTracerPath(b *testing.B) { benchRequest(b, nil, benchTracerPath) }

// BenchmarkRequestUnsampledTracerPath is BenchmarkRequestTracerPath with
// NeverSample.
func BenchmarkRequestUnsampledTracerPath(b *testing.B) {
	benchRequest(b, sdktrace.NeverSample(), benchTracerPath)
}

// BenchmarkRequestNoAggregator is the plainest setup: only
// WithTracerProvider and WithMeterProvider, so spans go through the Tracer
// and the inter-token latencies are replayed into the SDK histogram, one
// Record per gap.
func BenchmarkRequestNoAggregator(b *testing.B) { benchRequest(b, nil, benchNoAggregator) }

// BenchmarkRequestUnsampledNoAggregator is BenchmarkRequestNoAggregator with
// NeverSample.
func BenchmarkRequestUnsampledNoAggregator(b *testing.B) {
	benchRequest(b, sdktrace.NeverSample(), benchNoAggregator)
}

// Memory ------------------------------------------------------------------

// benchLiveHeap is the heap in use after a full collection.
func benchLiveHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

var benchMemTokens = []int{16, 4096}

// BenchmarkInflightMemory reports the live heap per in-flight request
// (B/inflight) for requests of 16 and 4096 output tokens, held mid-decode
// (half their tokens decoded and delivered). One op brings 512 requests
// from arrival to mid-decode; the heap is measured around it, outside the
// timer. Request ids and the benchmark's own slices are made before the
// first measurement; the frontend's Request handles count.
func BenchmarkInflightMemory(b *testing.B) {
	for _, toks := range benchMemTokens {
		b.Run("tokens="+strconv.Itoa(toks), func(b *testing.B) {
			b.ReportAllocs()
			var perReq float64
			for b.Loop() {
				b.StopTimer()
				p := buildBenchPipeline(nil, true)
				tr := newBenchTracker(b, p)
				e := newBenchEngine(b, tr, newBenchClock(time.Now(), benchEngineTick))
				e.reqs = make([]*otelstats.Request, 0, benchMemRequests)
				e.sched = make([]otelstats.Scheduled, 0, benchMemRequests)
				e.dec = make([]otelstats.Decoded, 0, benchMemRequests)
				e.fin = make([]otelstats.Finished, 0, benchMemRequests)
				before := benchLiveHeap()
				b.StartTimer()

				e.arrive(b, benchIDs[:benchMemRequests]...)
				e.prefill(b, benchPromptTokens)
				for range toks / 2 {
					e.decodeDeliver(b)
				}

				b.StopTimer()
				// Spans already ended wait in the BatchSpanProcessor's
				// queue for up to 5 s; flush them so only what the
				// in-flight requests hold is counted.
				if err := p.tp.ForceFlush(context.Background()); err != nil {
					b.Fatal(err)
				}
				after := benchLiveHeap()
				if tr.InFlight() != benchMemRequests {
					b.Fatalf("%d in flight, want %d", tr.InFlight(), benchMemRequests)
				}
				runtime.KeepAlive(e)
				perReq += (float64(after) - float64(before)) / benchMemRequests
				p.close()
				b.StartTimer()
			}
			b.ReportMetric(perReq/float64(b.N), "B/inflight")
		})
	}
}

// BenchmarkNaiveInflightMemory is the naive twin: live root and decode
// spans (the latter holding up to 128 token events) per in-flight request,
// for 128 requests.
func BenchmarkNaiveInflightMemory(b *testing.B) {
	for _, toks := range benchMemTokens {
		b.Run("tokens="+strconv.Itoa(toks), func(b *testing.B) {
			b.ReportAllocs()
			var perReq float64
			for b.Loop() {
				b.StopTimer()
				p := buildBenchPipeline(nil, false)
				n := newNaive(b, p.tp, p.mp)
				qs := make([]*naiveRequest, 0, benchNaiveMemRequests)
				before := benchLiveHeap()
				b.StartTimer()

				for _, id := range benchIDs[:benchNaiveMemRequests] {
					q := n.arrive(context.Background(), id, benchModel)
					q.queued("new")
					q.prefillChunk(benchPromptTokens, 0)
					qs = append(qs, q)
				}
				for range toks / 2 {
					for _, q := range qs {
						q.token()
					}
				}

				b.StopTimer()
				// Spans already ended wait in the BatchSpanProcessor's
				// queue for up to 5 s; flush them so only what the
				// in-flight requests hold is counted.
				if err := p.tp.ForceFlush(context.Background()); err != nil {
					b.Fatal(err)
				}
				after := benchLiveHeap()
				runtime.KeepAlive(qs)
				perReq += (float64(after) - float64(before)) / benchNaiveMemRequests
				p.close()
				b.StartTimer()
			}
			b.ReportMetric(perReq/float64(b.N), "B/inflight")
		})
	}
}

// Concurrency -------------------------------------------------------------

// benchMutexWait is the runtime's cumulative time goroutines spent blocked on a
// sync.Mutex or RWMutex (or a runtime-internal lock).
func benchMutexWait() float64 {
	s := []metrics.Sample{{Name: "/sync/mutex/wait/total:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64 {
		return 0
	}
	return s[0].Value.Float64()
}

// BenchmarkParallelDeliveries: frontend goroutines (b.RunParallel at
// GOMAXPROCS 2) record Detokenized on their own requests, one op per
// delivery, while an engine goroutine records Steps of all 256 requests.
// It reports the time goroutines spent blocked on locks per delivery
// (mutex-wait-ns/op) and the tokens the engine recorded meanwhile
// (engine-tok/op); cpu-ns/op is the CPU of all goroutines, the engine's
// included, per delivery. Variants:
//
//   - serial: one goroutine, a plain loop, no engine: the reference for
//     scaling (with no shared lock, parallel ns/op is about half of it).
//   - frontend-only: no engine goroutine.
//   - with-engine: the engine steps concurrently, unthrottled.
//   - global-lock-reference: as with-engine, but every call goes through
//     one shared mutex, to show what single-lock contention looks like in
//     the same metrics.
func BenchmarkParallelDeliveries(b *testing.B) {
	for _, v := range []struct {
		name                  string
		serial, engine, glock bool
	}{{"serial", true, false, false}, {"frontend-only", false, false, false}, {"with-engine", false, true, false}, {"global-lock-reference", false, true, true}} {
		b.Run(v.name, func(b *testing.B) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
			const procs = 2 // RunParallel goroutines: GOMAXPROCS × parallelism 1
			tr := newBenchTracker(b, newBenchPipeline(b, nil, true))
			e := newBenchEngine(b, tr, realBenchClock())
			e.arrive(b, benchIDs[:benchBatch]...)
			e.prefill(b, benchPromptTokens)
			e.decode(b, benchBatch)

			var glock sync.Mutex
			lock := func() {
				if v.glock {
					glock.Lock()
				}
			}
			unlock := func() {
				if v.glock {
					glock.Unlock()
				}
			}
			stop := make(chan struct{})
			var engineTok atomic.Int64
			var wg sync.WaitGroup
			if v.engine {
				wg.Go(func() {
					s := otelstats.Step{Decoded: e.dec}
					for {
						select {
						case <-stop:
							return
						default:
						}
						s.Time = time.Now()
						lock()
						err := tr.Step(&s)
						unlock()
						if err != nil {
							b.Error(err)
							return
						}
						engineTok.Add(int64(len(s.Decoded)))
					}
				})
			}
			var next atomic.Int32
			b.ReportAllocs()
			w0 := benchMutexWait()
			b.ResetTimer()
			cpu := startBenchCPU()
			if v.serial {
				for i := range b.N {
					if err := e.reqs[i%benchBatch].Detokenized(time.Now(), 1, 0); err != nil {
						b.Fatal(err)
					}
				}
			} else {
				b.RunParallel(func(pb *testing.PB) {
					w := int(next.Add(1) - 1)
					if w >= procs {
						b.Error("more RunParallel goroutines than request partitions")
						return
					}
					mine := e.reqs[w*benchBatch/procs : (w+1)*benchBatch/procs]
					i := 0
					for pb.Next() {
						lock()
						err := mine[i].Detokenized(time.Now(), 1, 0)
						unlock()
						if err != nil {
							b.Error(err)
							return
						}
						if i++; i == len(mine) {
							i = 0
						}
					}
				})
			}
			cpu.report(b)
			b.StopTimer()
			close(stop)
			wg.Wait()
			b.ReportMetric((benchMutexWait()-w0)*1e9/float64(b.N), "mutex-wait-ns/op")
			b.ReportMetric(float64(engineTok.Load())/float64(b.N), "engine-tok/op")
		})
	}
}

// Reference -----------------------------------------------------------------

var benchSinkTime time.Time

// BenchmarkTimeNow is one read of the clock, a reference for reading the
// other figures: the request benchmarks' callers read it twice per token
// (the engine's step and the frontend's delivery, one request per step), as
// the naive twin does (its own read plus the SDK's for the span event), and
// each parallel delivery reads it once.
func BenchmarkTimeNow(b *testing.B) {
	cpu := startBenchCPU()
	for b.Loop() {
		benchSinkTime = time.Now()
	}
	cpu.report(b)
}

// BenchmarkSweepOpenRequests is one sweep of a tracker holding 100,000
// requests that have not finished and are far from their TTL (a collector
// whose producers stopped, a replayed log whose requests never end): what
// the sweep, every 100 ms live or each second of a log, costs while none
// can expire.
func BenchmarkSweepOpenRequests(b *testing.B) {
	tr, err := otelstats.NewTracker(otelstats.WithRequestTTL(10 * time.Minute))
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	t0 := time.Unix(1_700_000_000, 0)
	for i := range 100_000 {
		if _, err := tr.Arrive(context.Background(), "r"+strconv.Itoa(i), otelstats.Arrival{Time: t0, Model: benchModel}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		tr.Sweep(t0.Add(time.Duration(i) * time.Millisecond))
	}
	if tr.InFlight() != 100_000 {
		b.Fatalf("%d in flight", tr.InFlight())
	}
}
