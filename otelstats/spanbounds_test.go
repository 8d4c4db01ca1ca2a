package otelstats

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/attributes"
)

// TestStatsInstantsAreRootBounds: RequestStats' arrival and finished
// times are the root span's start and end (SPEC §3: the values are the
// span boundaries), also when skew puts the engine's FINISHED, which ends
// an engine-only request, before the frontend's ARRIVED (SPEC §5: clamped
// and counted, never negative).
func TestStatsInstantsAreRootBounds(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ops      []Update
		finished float64 // ms, the root's end
		clamped  bool
	}{
		{"in order", []Update{
			arrived("r", 0, "m", "chat"),
			queued("r", 1),
			prefilling("r", 2, 5, 0),
			decoding("r", 3, 1),
			enFinished("r", 4, "stop"),
		}, 4, false},
		{"engine ends before the skewed ARRIVED", []Update{
			arrived("r", 10, "m", "chat"),
			queued("r", 2),
			prefilling("r", 3, 5, 0),
			decoding("r", 4, 1),
			enFinished("r", 6, "stop"),
		}, 10, true},
		{"aborted while queued, before the skewed ARRIVED", []Update{
			arrived("r", 10, "m", "chat"),
			queued("r", 2),
			enFinished("r", 3, "abort"),
		}, 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.feed(tc.ops)
			h.tr.Flush()
			s := h.statsOf("r")
			root, _ := h.treeOf(s)
			if !s.ArrivalTime.Equal(root.StartTime()) || !s.FinishedTime.Equal(root.EndTime()) {
				t.Errorf("arrival %v, finished %v; the root spans [%v, %v]", msSince(s.ArrivalTime), msSince(s.FinishedTime),
					msSince(root.StartTime()), msSince(root.EndTime()))
			}
			approx(t, "finished (ms)", msSince(s.FinishedTime), tc.finished)
			if got := s.FinishedTime.Sub(s.ArrivalTime); got != s.E2ELatency.Value || got < 0 {
				t.Errorf("finished - arrival = %v, e2e %v", got, s.E2ELatency.Value)
			}
			if (s.ClampedSpans > 0) != tc.clamped {
				t.Errorf("ClampedSpans = %d, want clamped %v", s.ClampedSpans, tc.clamped)
			}
			if n := h.counter(attributes.MetricSpansClamped); int(n) != s.ClampedSpans {
				t.Errorf("llm.spans.clamped = %d, want %d", n, s.ClampedSpans)
			}
		})
	}
}

// TestPreemptedTimeZero: a request preempted and resumed at the same
// instant (two updates with one timestamp) spent 0 s preempted; the root
// says so, as preempted_duration_s does, rather than leaving out the value
// of a preemption that happened (SPEC §2: absent only when its instants
// never happened). A request never preempted has no such attribute.
func TestPreemptedTimeZero(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ops     []Update
		present bool
	}{
		{"resumed at once", []Update{
			arrived("r", 0, "m", "chat"),
			queued("r", 1),
			prefilling("r", 2, 5, 0),
			decoding("r", 3, 1),
			preempted("r", 4),
			prefilling("r", 4, 6, 0),
			decoding("r", 5, 1),
			enFinished("r", 6, "stop"),
		}, true},
		{"never preempted", []Update{
			arrived("r", 0, "m", "chat"),
			queued("r", 1),
			prefilling("r", 2, 5, 0),
			decoding("r", 3, 1),
			enFinished("r", 6, "stop"),
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.feed(tc.ops)
			s := h.statsOf("r")
			root, _ := h.treeOf(s)
			v, ok := attrOf(root.Attributes(), attributes.PreemptedTime)
			if ok != tc.present || ok && v.AsFloat64() != 0 {
				t.Errorf("root %s = %v (present %v), want present %v, 0", attributes.PreemptedTime, v.AsFloat64(), ok, tc.present)
			}
		})
	}
}

// TestIncomingTraceContextKept: a request arriving with a W3C traceparent
// and tracestate is a child of the caller's span in the caller's trace,
// and the span context it hands out at arrival (Request.SpanContext,
// Request.Context, what outgoing calls propagate) carries the caller's
// tracestate on, as the W3C Trace Context requires of every participant
// and as the exported root's span context does.
func TestIncomingTraceContextKept(t *testing.T) {
	ts, err := trace.ParseTraceState("vendor=abc,other=1")
	if err != nil {
		t.Fatal(err)
	}
	parent := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true,
	})
	h := newHarness(t)
	q, err := h.tr.Arrive(trace.ContextWithRemoteSpanContext(context.Background(), parent), "r", Arrival{Time: at(0), Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	sc := q.SpanContext()
	if sc.TraceID() != parent.TraceID() {
		t.Errorf("handed-out trace id %s, want the caller's %s", sc.TraceID(), parent.TraceID())
	}
	if got := sc.TraceState().String(); got != ts.String() {
		t.Errorf("handed-out tracestate %q, want %q", got, ts.String())
	}
	if got := trace.SpanContextFromContext(q.Context(context.Background())).TraceState().String(); got != ts.String() {
		t.Errorf("Request.Context's tracestate %q, want %q", got, ts.String())
	}
	h.feed([]Update{feFinished("r", 5, "stop")})
	s := h.statsOf("r")
	root, _ := h.treeOf(s)
	if root.SpanContext().TraceID() != parent.TraceID() || root.Parent().SpanID() != parent.SpanID() {
		t.Errorf("root %s/%s, parent %s; want trace %s, parent %s", root.SpanContext().TraceID(), root.SpanContext().SpanID(),
			root.Parent().SpanID(), parent.TraceID(), parent.SpanID())
	}
	if root.SpanContext().SpanID() != sc.SpanID() {
		t.Errorf("root span id %s, handed out %s", root.SpanContext().SpanID(), sc.SpanID())
	}
	if got := root.SpanContext().TraceState().String(); got != ts.String() {
		t.Errorf("root tracestate %q, want %q", got, ts.String())
	}
}

// TestDetokenizeBusyTimeReported: llm.detokenize.busy_time sums the busy
// durations the frontend reported, in seconds; a frontend that reports
// none (vLLM's API server does not measure it, an HTTP observer cannot)
// leaves it absent, not a measured 0 s (SPEC §2: a value nobody saw is
// absent, never zero).
func TestDetokenizeBusyTimeReported(t *testing.T) {
	for _, tc := range []struct {
		name  string
		busy  []time.Duration // per delivery
		want  float64         // seconds
		valid bool
	}{
		{"every delivery", []time.Duration{500 * us, 250 * us, 250 * us}, 0.001, true},
		{"some deliveries", []time.Duration{0, 750 * us, 0}, 0.00075, true},
		{"none reported", []time.Duration{0, 0, 0}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.feed([]Update{
				arrived("r", 0, "m", "chat"),
				inputProcessed("r", 1, 4),
				queued("r", 2),
				prefilling("r", 3, 4, 0),
				decoding("r", 10, 1),
				detok("r", 11, 1, tc.busy[0]),
				decoding("r", 20, 1),
				detok("r", 21, 1, tc.busy[1]),
				decoding("r", 30, 1),
				detok("r", 31, 1, tc.busy[2]),
				enFinished("r", 30, "stop"),
				feFinished("r", 32, "stop"),
			})
			_, kids := h.treeOf(h.statsOf("r"))
			var d sdktrace.ReadOnlySpan
			for _, k := range kids {
				if k.Name() == attributes.SpanDetokenize {
					d = k
				}
			}
			if d == nil {
				t.Fatal("no llm.detokenize span")
			}
			approx(t, "detokenize start (ms)", msSince(d.StartTime()), 11)
			approx(t, "detokenize end (ms)", msSince(d.EndTime()), 31)
			checkAttrs(t, "detokenize", d.Attributes(), []attribute.KeyValue{attributes.DetokenizeDeliveries.Int(3)})
			v, ok := attrOf(d.Attributes(), attributes.DetokenizeBusyTime)
			if ok != tc.valid || ok && (v.Type() != attribute.FLOAT64 || v.AsFloat64() != tc.want) {
				t.Errorf("busy_time = %s (present %v), want %v (present %v)", v.String(), ok, tc.want, tc.valid)
			}
		})
	}
}

// TestStepsFollowTheirRun: at DetailTokens each decode segment's step
// events and token offsets are its own run's DECODINGs, also when a run is
// preempted and resumed at the instant of its last step (two updates with
// one timestamp): the step belongs to the run that made its token, as the
// segment's llm.decode.output_tokens counts it, not to the run that began
// at the same instant.
func TestStepsFollowTheirRun(t *testing.T) {
	h := newHarness(t, WithDetail(DetailTokens))
	h.feed([]Update{
		arrived("r", 0, "m", "chat"),
		queued("r", 1),
		prefilling("r", 2, 4, 0),
		decoding("r", 3, 1),
		decoding("r", 5, 1),
		preempted("r", 5),
		prefilling("r", 5, 6, 0),
		decoding("r", 7, 1),
		enFinished("r", 8, "stop"),
	})
	_, kids := h.treeOf(h.statsOf("r"))
	var segs [][]int64
	for _, k := range kids {
		if k.Name() != attributes.SpanDecode {
			continue
		}
		n, _ := attrOf(k.Attributes(), attributes.DecodeOutputTokens)
		offs, _ := attrOf(k.Attributes(), attributes.DecodeTokenOffsets)
		if len(k.Events()) != int(n.AsInt64()) || len(offs.AsInt64Slice()) != int(n.AsInt64()) {
			t.Errorf("segment at %v ms: %d tokens, %d step events, offsets %v", msSince(k.StartTime()), n.AsInt64(), len(k.Events()), offs.AsInt64Slice())
		}
		segs = append(segs, offs.AsInt64Slice())
	}
	if len(segs) != 2 || len(segs[0]) != 2 || segs[0][1] != 2000 || len(segs[1]) != 1 || segs[1][0] != 0 {
		t.Errorf("token offsets (µs) per segment %v, want [[0 2000] [0]]", segs)
	}
}

// TestTokenLatenciesAbsentWithoutTokenTimes: output_token_latencies_s is
// absent when no token has a time — a response delivered in one piece, a
// request aborted before its first token — as TTFT and TPOT are (SPEC §2);
// a request whose one token has a time has an empty list: no gap.
func TestTokenLatenciesAbsentWithoutTokenTimes(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  []Update
		want []time.Duration // nil: absent
	}{
		{"one piece", []Update{
			arrived("r", 0, "m", "chat"),
			{RequestID: "r", Kind: KindFinished, Side: SideFrontend, Time: at(9), FinishReason: "stop", NumOutputTokens: 7},
		}, nil},
		{"aborted while queued", []Update{
			arrived("r", 0, "m", "chat"),
			queued("r", 1),
			enFinished("r", 3, "abort"),
		}, nil},
		{"one token", []Update{
			arrived("r", 0, "m", "chat"),
			detok("r", 4, 1, 0),
			feFinished("r", 5, "stop"),
		}, []time.Duration{}},
		{"two tokens", []Update{
			arrived("r", 0, "m", "chat"),
			detok("r", 4, 1, 0),
			detok("r", 6, 1, 0),
			feFinished("r", 7, "stop"),
		}, []time.Duration{2 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.feed(tc.ops)
			s := h.statsOf("r")
			got := s.OutputTokenLatencies
			if (got == nil) != (tc.want == nil) || len(got) != len(tc.want) || len(got) > 0 && got[0] != tc.want[0] {
				t.Errorf("output_token_latencies = %#v, want %#v", got, tc.want)
			}
			if has := strings.Contains(string(s.AppendJSON(nil)), "output_token_latencies_s"); has != (tc.want != nil) {
				t.Errorf("JSON has output_token_latencies_s: %v: %s", has, s.AppendJSON(nil))
			}
		})
	}
}

// TestTrustedUnsampledParentHandedOn: a trusted caller's unsampled
// traceparent decides at arrival that the trace is dropped (the policy
// cannot keep it), so the span context handed downstream says unsampled
// from then on, as W3C Trace Context has a participant that does not
// record pass the flag on; it said sampled unless a parent-based head
// sampler happened to be configured, and the next hop (the engine behind
// the proxy) exported spans under a root that never came.
func TestTrustedUnsampledParentHandedOn(t *testing.T) {
	for _, tc := range []struct {
		name string
		head sdktrace.Sampler
	}{
		{"no head sampler", nil},
		{"always-on head sampler", sdktrace.AlwaysSample()},
	} {
		for _, sampled := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, parent sampled %v", tc.name, sampled), func(t *testing.T) {
				opts := []Option{WithTrustParentSampling(true)}
				if tc.head != nil {
					opts = append(opts, WithHeadSampler(tc.head))
				}
				h := newHarness(t, opts...)
				var flags trace.TraceFlags
				if sampled {
					flags = trace.FlagsSampled
				}
				parent := trace.NewSpanContext(trace.SpanContextConfig{
					TraceID: trace.TraceID{1: 1}, SpanID: trace.SpanID{1: 2}, TraceFlags: flags, Remote: true})
				q, err := h.tr.Arrive(trace.ContextWithRemoteSpanContext(context.Background(), parent), "r", Arrival{Time: at(0), Model: "m"})
				if err != nil {
					t.Fatal(err)
				}
				if got := q.SpanContext().IsSampled(); got != sampled {
					t.Errorf("handed-out span context sampled %v, want the trusted parent's %v", got, sampled)
				}
				if err := q.Finish(at(5), FinishStop); err != nil {
					t.Fatal(err)
				}
				s := h.statsOf("r")
				if s.Sampled != sampled || len(h.rec.Ended()) > 0 != sampled {
					t.Errorf("Sampled %v (%s), %d spans; want kept %v", s.Sampled, s.SamplingReason, len(h.rec.Ended()), sampled)
				}
			})
		}
	}
}

// TestStepEventsUnknownNumbers: an llm.decode.step event carries
// llm.step.index and llm.step.batch_size when the engine said them
// (Tracker.Step numbers its steps from 1 and counts the batch); a
// DECODING recorded on its own (Record, the update log) says neither, and
// its event has neither — not a step 0 in a batch of 0 (SPEC §2: a value
// nobody saw is absent, never zero).
func TestStepEventsUnknownNumbers(t *testing.T) {
	for _, viaStep := range []bool{false, true} {
		t.Run(fmt.Sprintf("step %v", viaStep), func(t *testing.T) {
			h := newHarness(t, WithDetail(DetailSteps))
			h.feed([]Update{arrived("r", 0, "m", "chat"), queued("r", 1), prefilling("r", 2, 4, 0)})
			for _, ms := range []float64{3, 4} {
				if viaStep {
					// "other" is not known yet (held): the batch is two.
					_ = h.tr.Step(&Step{Time: at(ms), Decoded: []Decoded{{RequestID: "r"}, {RequestID: "other"}}})
				} else {
					h.must(decoding("r", ms, 1))
				}
			}
			h.must(enFinished("r", 5, "stop"))
			_, kids := h.treeOf(h.statsOf("r"))
			for _, k := range kids {
				if k.Name() != attributes.SpanDecode {
					continue
				}
				if len(k.Events()) != 2 {
					t.Fatalf("%d step events, want 2", len(k.Events()))
				}
				for i, ev := range k.Events() {
					idx, hasIdx := attrOf(ev.Attributes, attributes.StepIndex)
					b, hasB := attrOf(ev.Attributes, attributes.StepBatchSize)
					if hasIdx != viaStep || hasB != viaStep || viaStep && (idx.AsInt64() < 1 || b.AsInt64() != 2) {
						t.Errorf("event %d: index %v (%v), batch %v (%v)", i, idx.AsInt64(), hasIdx, b.AsInt64(), hasB)
					}
				}
			}
		})
	}
}

// The brief's sequences not in scenarios, held to the same checks.
var hourMs = float64(time.Hour / time.Millisecond)

var moreScenarios = []scenario{
	{
		name: "INPUT_PROCESSED at QUEUED: no handoff, a zero wait",
		id:   "ip-queued",
		ops: []Update{
			arrived("ip-queued", 0, "m", "chat"),
			inputProcessed("ip-queued", 2, 6),
			queued("ip-queued", 2),
			prefilling("ip-queued", 2, 6, 0),
			decoding("ip-queued", 5, 1),
			detok("ip-queued", 6, 1, 0),
			decoding("ip-queued", 8, 1),
			detok("ip-queued", 9, 1, 0),
			enFinished("ip-queued", 8, "stop"),
			feFinished("ip-queued", 10, "stop"),
		},
		stats: wantStats{reason: "stop", finished: 10, e2e: 10, queue: 0, ttft: 6, prefill: 4, decode: 4,
			inference: 8, tpot: 4, itl: []float64{3}, prompt: 6, cached: 0, out: 2},
		root: wantRoot{name: "chat m", end: 10, attrs: []attribute.KeyValue{attributes.UsageCacheReadInput.Int(0)}},
		kids: []wantSpan{
			spInput(0, 2, 6),
			spQueue(2, 2, "new"),
			spPrefill(2, 6, 6, 0, 1, false),
			spDecode(6, 8, 2, 0),
			spDetok(6, 9, 0, 2),
		},
	},
	{
		name: "error finish, the frontend's error type",
		id:   "err",
		ops: []Update{
			arrived("err", 0, "m", "chat"),
			inputProcessed("err", 1, 5),
			queued("err", 2),
			prefilling("err", 3, 5, 0),
			decoding("err", 6, 1),
			detok("err", 7, 1, 0),
			enFinished("err", 9, "error"),
			{RequestID: "err", Kind: KindFinished, Side: SideFrontend, Time: at(10), FinishReason: "error", ErrorType: "engine_dead"},
		},
		stats: wantStats{reason: "error", errType: "engine_dead", finished: 10, e2e: 10, queue: 1, ttft: 7, prefill: 4,
			decode: 3, inference: 7, tpot: absent, itl: []float64{}, prompt: 5, cached: 0, out: 1},
		root: wantRoot{name: "chat m", end: 10, status: codes.Error, statusDesc: "engine_dead"},
		kids: []wantSpan{
			spInput(0, 1, 5),
			spHandoff(1, 2),
			spQueue(2, 3, "new"),
			spPrefill(3, 7, 5, 0, 1, false),
			spDecode(7, 9, 1, 0),
			spDetok(7, 7, 0, 1),
		},
	},
	{
		name: "middleware: frontend only, streamed",
		id:   "mw",
		ops: []Update{
			arrived("mw", 0, "m", "chat"),
			inputProcessed("mw", 1, 9),
			detok("mw", 5, 1, 0),
			detok("mw", 7, 2, 0),
			detok("mw", 8, 0, 0),
			feFinished("mw", 9, "stop"),
		},
		stats: wantStats{reason: "stop", finished: 9, e2e: 9, queue: absent, ttft: 5, prefill: absent, decode: 4,
			inference: absent, tpot: 2, itl: []float64{2}, prompt: 9, cached: absent, out: 3},
		root: wantRoot{name: "chat m", end: 9, noAttrs: []attribute.Key{attributes.UsageCacheReadInput, attributes.PreemptedTime}},
		kids: []wantSpan{
			spInput(0, 1, 9),
			spDetok(5, 8, 0, 3),
		},
	},
	{
		name: "engine only, three hours",
		id:   "long",
		ops: []Update{
			arrived("long", 0, "m", "chat"),
			queued("long", 1),
			prefilling("long", 2, 3, 0),
			decoding("long", 3, 1),
			decoding("long", 3+2*hourMs, 1),
			enFinished("long", 3+3*hourMs, "length"),
		},
		stats: wantStats{reason: "length", finished: 3 + 3*hourMs, e2e: 3 + 3*hourMs, queue: 1, ttft: 3, prefill: 1,
			decode: 3 * hourMs, inference: 1 + 3*hourMs, tpot: 3 * hourMs, itl: []float64{2 * hourMs}, prompt: absent, cached: 0, out: 2},
		root: wantRoot{name: "chat m", end: 3 + 3*hourMs},
		kids: []wantSpan{
			spQueue(1, 2, "new"),
			spPrefill(2, 3, 3, 0, 1, false),
			spDecode(3, 3+3*hourMs, 2, 0),
		},
	},
}

func TestMoreScenarios(t *testing.T) {
	for _, sc := range moreScenarios {
		t.Run(sc.name, func(t *testing.T) { checkScenario(t, sc) })
	}
}
