package otelstats

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/spans"
)

// Trace ids a trace-id-ratio sampler at 0.5 keeps (low half) and drops.
var (
	lowID  = trace.TraceID{0: 1, 8: 0x10, 15: 1}
	highID = trace.TraceID{0: 1, 8: 0xf0, 15: 1}
)

// countingSampler counts the decisions asked of it.
type countingSampler struct {
	sdktrace.Sampler
	n atomic.Int64
}

func (c *countingSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	c.n.Add(1)
	return c.Sampler.ShouldSample(p)
}

func parentCtx(id trace.TraceID, sampled bool) context.Context {
	var f trace.TraceFlags
	if sampled {
		f = trace.FlagsSampled
	}
	return trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: id, SpanID: trace.SpanID{7: 9}, TraceFlags: f, Remote: true}))
}

// TestHeadSampler: the head sampler decides at arrival; the root's span
// context says so from then on; an untrusted parent's flag decides
// nothing; a dropped trace leaves no span and every metric.
func TestHeadSampler(t *testing.T) {
	ratio := sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.5))
	for _, tc := range []struct {
		name    string
		sampler sdktrace.Sampler
		policy  *SamplingPolicy
		ctx     context.Context
		trust   bool
		traceID trace.TraceID // Arrival.TraceID, without a parent
		finish  string
		keep    bool
		down    bool // the root span context's sampled flag, from arrival
		reason  string
	}{
		{name: "ratio keeps a low trace id", sampler: ratio, traceID: lowID, keep: true, down: true, reason: SampledHead},
		{name: "ratio drops a high trace id", sampler: ratio, traceID: highID, reason: NotSampled},
		{name: "untrusted sampled parent decides nothing", sampler: ratio, ctx: parentCtx(highID, true), reason: NotSampled},
		{name: "untrusted unsampled parent decides nothing", sampler: ratio, ctx: parentCtx(lowID, false), keep: true, down: true, reason: SampledHead},
		{name: "trusted sampled parent decides", sampler: ratio, ctx: parentCtx(highID, true), trust: true, keep: true, down: true, reason: SampledParent},
		{name: "trusted unsampled parent decides", sampler: ratio, ctx: parentCtx(lowID, false), trust: true, reason: NotSampled},
		{name: "never, whatever the policy keeps", sampler: sdktrace.NeverSample(), policy: &SamplingPolicy{KeepErrors: true, Ratio: 1},
			traceID: lowID, finish: FinishError, reason: NotSampled},
		{name: "always, then the policy", sampler: sdktrace.AlwaysSample(), policy: &SamplingPolicy{KeepErrors: true},
			traceID: lowID, finish: FinishError, keep: true, down: true, reason: SampledError},
		{name: "always, the policy drops", sampler: sdktrace.AlwaysSample(), policy: &SamplingPolicy{}, traceID: lowID, down: true, reason: NotSampled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			h := newHarness(t, WithSpanProcessor(rec), WithHeadSampler(tc.sampler), WithSampling(tc.policy))
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			q, err := h.tr.Arrive(ctx, "r", Arrival{Time: base, Model: "m", TraceID: tc.traceID, TrustParent: tc.trust})
			if err != nil {
				t.Fatal(err)
			}
			// What goes downstream says what the head sampler decided
			// (the policy decides later than anyone can be told).
			if got := q.SpanContext().IsSampled(); got != tc.down {
				t.Errorf("root span context sampled %v, want %v", got, tc.down)
			}
			if got := trace.SpanContextFromContext(q.Context(context.Background())).IsSampled(); got != tc.down {
				t.Errorf("Context's span context sampled %v, want %v", got, tc.down)
			}
			finish := tc.finish
			if finish == "" {
				finish = FinishStop
			}
			if err := q.Finish(at(5), finish); err != nil {
				t.Fatal(err)
			}
			s := h.statsOf("r")
			if s.Sampled != tc.keep || s.SamplingReason != tc.reason {
				t.Errorf("Sampled %v, reason %q; want %v, %q", s.Sampled, s.SamplingReason, tc.keep, tc.reason)
			}
			if got := len(rec.Ended()) > 0; got != tc.keep {
				t.Errorf("%d spans exported; kept %v", len(rec.Ended()), tc.keep)
			}
			if n, _ := h.histCount(attributes.MetricRequestDuration); n != 1 {
				t.Errorf("%s counted %d requests, want 1", attributes.MetricRequestDuration, n)
			}
		})
	}
}

// TestHeadSampleBeforeArrive: a decision asked before arrival
// (HeadSample, as a proxy asks before calling its upstream) is the one
// Arrive keeps, without asking again; so is one reached through Record's
// ARRIVED, and without a head sampler every request is HeadSampled.
func TestHeadSampleBeforeArrive(t *testing.T) {
	cs := &countingSampler{Sampler: sdktrace.TraceIDRatioBased(0.5)}
	h := newHarness(t, WithSpanProcessor(tracetest.NewSpanRecorder()), WithHeadSampler(cs))
	for i, id := range []trace.TraceID{lowID, highID} {
		d := h.tr.HeadSample(context.Background(), id, "chat", false)
		if want := []HeadDecision{HeadSampled, HeadDropped}[i]; d != want {
			t.Fatalf("HeadSample(%v) = %v, want %v", id, d, want)
		}
		rid := []string{"low", "high"}[i]
		q, err := h.tr.Arrive(context.Background(), rid, Arrival{Time: base, Model: "m", TraceID: id, Head: d})
		if err != nil {
			t.Fatal(err)
		}
		if q.SpanContext().IsSampled() != d.Sampled() {
			t.Errorf("%s: span context sampled %v, decision %v", rid, q.SpanContext().IsSampled(), d)
		}
		_ = q.Finish(at(1), FinishStop)
		if s := h.statsOf(rid); s.Sampled != d.Sampled() {
			t.Errorf("%s: Sampled %v, decision %v", rid, s.Sampled, d)
		}
	}
	if n := cs.n.Load(); n != 2 {
		t.Errorf("the sampler was asked %d times for 2 requests, want 2", n)
	}
	// An engine's ARRIVED through Record is decided at arrival as well.
	h.must(Update{RequestID: "rec", Kind: KindArrived, Side: SideFrontend, Time: at(2), Model: "m"})
	h.must(Update{RequestID: "rec", Kind: KindFinished, Side: SideFrontend, Time: at(3), FinishReason: FinishStop})
	if n := cs.n.Load(); n != 3 {
		t.Errorf("the sampler was asked %d times after an ARRIVED, want 3", n)
	}

	plain := newHarness(t)
	if d := plain.tr.HeadSample(context.Background(), highID, "chat", false); d != HeadSampled {
		t.Errorf("without a head sampler HeadSample = %v, want HeadSampled", d)
	}
	off, err := NewTracker(WithTraces(false), WithHeadSampler(sdktrace.NeverSample()))
	if err != nil {
		t.Fatal(err)
	}
	defer off.Shutdown(context.Background())
	if d := off.HeadSample(context.Background(), lowID, "chat", false); d != HeadSampled {
		t.Errorf("building no traces, HeadSample = %v, want HeadSampled", d)
	}
}

// TestHeadSamplerName: the sampler sees the root's name and kind.
func TestHeadSamplerName(t *testing.T) {
	var got sdktrace.SamplingParameters
	s := samplerFunc(func(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
		got = p
		return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample}
	})
	tr, err := NewTracker(WithHeadSampler(s), WithTracerProvider(sdktrace.NewTracerProvider()))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	if _, err := tr.Arrive(context.Background(), "r", Arrival{Time: time.Now(), Model: "m", Operation: "text_completion", TraceID: lowID}); err != nil {
		t.Fatal(err)
	}
	if got.Name != "text_completion m" || got.Kind != trace.SpanKindServer || got.TraceID != lowID {
		t.Errorf("sampler saw %q, %v, %v; want the root's name, server, the trace id", got.Name, got.Kind, got.TraceID)
	}
}

type samplerFunc func(sdktrace.SamplingParameters) sdktrace.SamplingResult

func (f samplerFunc) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult { return f(p) }
func (f samplerFunc) Description() string                                                { return "func" }

// A parent's W3C random flag goes on down the trace, as the SDK's Tracer
// carries it: in the span context known from arrival (what a proxy sends
// upstream) and on the exported root, which agree.
func TestParentRandomFlag(t *testing.T) {
	h := newHarness(t)
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: spans.NewTraceID(), SpanID: spans.NewSpanID(),
		TraceFlags: trace.FlagsRandom, Remote: true}) // not sampled: an untrusted caller's flag decides nothing
	q, err := h.tr.Arrive(trace.ContextWithRemoteSpanContext(context.Background(), parent), "r", Arrival{Time: at(0), Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	want := trace.FlagsRandom | trace.FlagsSampled
	if got := q.SpanContext().TraceFlags(); got != want {
		t.Errorf("span context flags %v, want %v", got, want)
	}
	if err := q.Finish(at(5), "stop"); err != nil {
		t.Fatal(err)
	}
	root, _ := h.treeOf(h.statsOf("r"))
	if got := root.SpanContext().TraceFlags(); got != want || !root.SpanContext().Equal(q.SpanContext()) {
		t.Errorf("root %v, flags %v; want the arrival's %v", root.SpanContext(), got, q.SpanContext())
	}
}
