package otelstats

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/spans"
)

// The interleaving scenario: each side's updates in its own order.
func ivFrontend() []Update {
	return []Update{
		arrived("iv", 0, "llama-3-8b", "chat"),
		inputProcessed("iv", 1, 10),
		detok("iv", 21, 1, 0),
		detok("iv", 31, 1, 0),
		detok("iv", 41, 1, 0),
		feFinished("iv", 42, "stop"),
	}
}

func ivEngine() []Update {
	return []Update{
		queued("iv", 2),
		prefilling("iv", 5, 10, 2),
		decoding("iv", 20, 1),
		decoding("iv", 30, 1),
		decoding("iv", 40, 1),
		enFinished("iv", 40, "stop"),
	}
}

// Whatever the order across sides, the request is the same.
var ivStats = wantStats{
	reason: "stop", arrived: 0, finished: 42,
	e2e:       42,
	queue:     3,    // 5 - 2
	ttft:      21,   // first DETOKENIZED 21 - 0
	prefill:   16,   // 21 - 5
	decode:    21,   // 42 - 21
	inference: 37,   // 42 - 5
	tpot:      10.5, // 21 / (3 - 1)
	itl:       []float64{10, 10},
	prompt:    10, cached: 2, out: 3,
}

var ivKids = []wantSpan{
	spInput(0, 1, 10),
	spHandoff(1, 2),
	spQueue(2, 5, "new"),
	spPrefill(5, 21, 10, 2, 1, false),
	spDecode(21, 40, 3, 0),
	spDetok(21, 41, 0, 3),
}

// merge interleaves fe and en by picks: true takes the frontend's next.
func merge(fe, en []Update, picks []bool) []Update {
	var out []Update
	for _, p := range picks {
		if p {
			out, fe = append(out, fe[0]), fe[1:]
		} else {
			out, en = append(out, en[0]), en[1:]
		}
	}
	return out
}

func picks(s string) []bool {
	var p []bool
	for _, c := range s {
		p = append(p, c == 'F')
	}
	return p
}

func TestInterleavedSides(t *testing.T) {
	// F = the frontend's next update reaches the tracker, E = the engine's.
	named := []struct{ name, order string }{
		{"in time order", "FFEEEFEFEFEF"},
		{"frontend DETOKENIZED before the engine's DECODING", "FFEEFFEEFEEF"},
		{"engine updates before ARRIVED are held, then applied", "EEEFFFEFEFEF"},
		{"all deliveries before the engine's PREFILLING", "FFFFFEEEEEEF"},
		{"frontend FINISHED before the engine's", "EFFFFFFEEEEE"},
		{"engine FINISHED first, frontend waits in grace", "FFEEEEEEFFFF"},
	}
	for _, n := range named {
		t.Run(n.name, func(t *testing.T) {
			h := newHarness(t)
			h.feed(merge(ivFrontend(), ivEngine(), picks(n.order)))
			checkIV(t, h)
		})
	}
	// Random merges that keep each side's order. Two constraints come from
	// SPEC §1: the frontend's FINISHED ends the request at once when no
	// engine update has reached the tracker yet, and the engine's FINISHED
	// waits for the frontend only once the frontend has reported more than
	// ARRIVED.
	rng := rand.New(rand.NewPCG(2, 26))
	for i := 0; i < 200; i++ {
		p := make([]bool, 12)
		for j := range 6 {
			p[j] = true
		}
		rng.Shuffle(len(p), func(a, b int) { p[a], p[b] = p[b], p[a] })
		fe, en := 0, 0
		ok := true
		for _, x := range p {
			if x {
				fe++
				if fe == 6 && en == 0 {
					ok = false
				}
			} else {
				en++
				if en == 6 && fe < 2 {
					ok = false
				}
			}
		}
		if !ok {
			continue
		}
		h := newHarness(t)
		h.feed(merge(ivFrontend(), ivEngine(), p))
		checkIV(t, h)
		if t.Failed() {
			t.Fatalf("order %v", p)
		}
	}
}

func checkIV(t *testing.T, h *harness) {
	t.Helper()
	if n := h.rejects(""); n != 0 {
		t.Fatalf("%d rejections", n)
	}
	if n := h.tr.InFlight(); n != 0 {
		t.Fatalf("InFlight = %d", n)
	}
	s := h.statsOf("iv")
	checkStats(t, s, ivStats)
	have, not := rootLatencyAttrs(ivStats)
	h.checkTree(s, wantRoot{name: "chat llama-3-8b", start: 0, end: 42, attrs: have, noAttrs: not}, ivKids)
}

// graceOps: the engine finishes at 22 and the frontend, which has been
// reporting, never sends its FINISHED.
func graceOps() []Update {
	return []Update{
		arrived("g", 0, "m", "chat"),
		inputProcessed("g", 1, 4),
		queued("g", 2),
		prefilling("g", 3, 4, 0),
		decoding("g", 10, 1),
		detok("g", 11, 1, 0),
		decoding("g", 20, 1),
		detok("g", 21, 1, 0),
		enFinished("g", 22, "stop"),
	}
}

func TestEngineFinishedWaitsForFrontend(t *testing.T) {
	want := wantStats{
		reason: "stop", arrived: 0, finished: 22,
		e2e: 22, queue: 1, ttft: 11, prefill: 8, decode: 11, inference: 19, tpot: 11,
		itl: []float64{10}, prompt: 4, cached: 0, out: 2,
	}
	t.Run("sweep past the default grace", func(t *testing.T) {
		h := newHarness(t)
		h.feed(graceOps())
		h.tr.Sweep(at(22 + 1999)) // 1.999 s < 2 s grace
		if len(h.stats) != 0 || h.tr.InFlight() != 1 {
			t.Fatalf("finished within the grace period")
		}
		h.tr.Sweep(at(22 + 2000))
		if h.tr.InFlight() != 0 {
			t.Fatalf("still in flight after the grace period")
		}
		checkStats(t, h.statsOf("g"), want)
		// The frontend's FINISHED after the wait is too late.
		u := feFinished("g", 2030, "stop")
		checkRejection(t, h.tr.Record(u), u, ReasonAfterFinished)
	})
	t.Run("configured grace", func(t *testing.T) {
		h := newHarness(t, WithFrontendGrace(100*time.Millisecond))
		h.feed(graceOps())
		h.tr.Sweep(at(121))
		if len(h.stats) != 0 {
			t.Fatal("finished 99 ms into a 100 ms grace")
		}
		h.tr.Sweep(at(122))
		checkStats(t, h.statsOf("g"), want)
	})
	t.Run("Flush ends the wait at once", func(t *testing.T) {
		h := newHarness(t)
		h.feed(graceOps())
		h.tr.Flush()
		checkStats(t, h.statsOf("g"), want)
	})
	t.Run("other requests' updates move time past the grace", func(t *testing.T) {
		h := newHarness(t)
		h.feed(graceOps())
		h.must(arrived("later", 2030, "m", "chat"))
		checkStats(t, h.statsOf("g"), want)
	})
	t.Run("the frontend's FINISHED within the grace ends it there", func(t *testing.T) {
		h := newHarness(t)
		h.feed(graceOps())
		h.must(feFinished("g", 24, "stop"))
		w := want
		w.finished, w.e2e, w.decode, w.inference, w.tpot = 24, 24, 13, 21, 13 // 24-0, 24-11, 24-3, 13/1
		checkStats(t, h.statsOf("g"), w)
	})
	t.Run("zero grace does not wait", func(t *testing.T) {
		h := newHarness(t, WithFrontendGrace(0))
		h.feed(graceOps())
		checkStats(t, h.statsOf("g"), want)
	})
	t.Run("an engine-only request does not wait", func(t *testing.T) {
		h := newHarness(t)
		h.feed([]Update{arrived("e", 0, "m", "chat"), queued("e", 1), prefilling("e", 2, 3, 0), decoding("e", 5, 1), enFinished("e", 6, "stop")})
		checkStats(t, h.statsOf("e"), wantStats{
			reason: "stop", finished: 6, e2e: 6, queue: 1, ttft: 5, prefill: 3, decode: 1, inference: 4,
			tpot: absent, prompt: absent, cached: 0, out: 1,
		})
	})
}

func TestShutdownEndsUnfinished(t *testing.T) {
	h := newHarness(t)
	h.feed([]Update{
		arrived("u", 0, "m", "chat"),
		inputProcessed("u", 1, 4),
		queued("u", 2),
		prefilling("u", 3, 4, 0),
		decoding("u", 10, 1),
		detok("u", 11, 1, 0),
	})
	// A second request waits for its frontend: Shutdown's flush ends it
	// normally, not as unfinished.
	h.feed(graceOps())
	if err := h.tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := h.tr.InFlight(); n != 0 {
		t.Fatalf("InFlight = %d after Shutdown", n)
	}
	s := h.statsOf("u")
	checkStats(t, s, wantStats{
		reason: "unfinished", errType: "unfinished", arrived: 0,
		finished:  11, // the last update seen
		e2e:       11,
		queue:     1,
		ttft:      11,
		prefill:   8,      // 11 - 3
		decode:    0,      // 11 - 11
		inference: 8,      // 11 - 3
		tpot:      absent, // one token
		prompt:    4, cached: 0, out: 1,
	})
	h.checkTree(s, wantRoot{name: "chat m", start: 0, end: 11, status: codes.Error, statusDesc: "unfinished",
		attrs: []attribute.KeyValue{attributes.ErrorType.String("unfinished"), attributes.FinishReasons.StringSlice([]string{"unfinished"})}},
		[]wantSpan{
			spInput(0, 1, 4),
			spHandoff(1, 2),
			spQueue(2, 3, "new"),
			spPrefill(3, 11, 4, 0, 1, false),
			spDecode(11, 11, 1, 0),
			spDetok(11, 11, 0, 1),
		})
	if g := h.statsOf("g"); g.FinishReason != "stop" {
		t.Errorf("waiting request ended as %q, want stop", g.FinishReason)
	}
	h.wantCounter(attributes.MetricRequests, 1, attributes.FinishReason.String("unfinished"))
	h.wantCounter(attributes.MetricRequests, 1, attributes.FinishReason.String("stop"))
	h.wantHist(attributes.MetricRequestDuration, 1, 11, attributes.ErrorType.String("unfinished"))
}

func TestSameIDDifferentModels(t *testing.T) {
	h := newHarness(t)
	m := func(u Update, model string) Update { u.Model = model; return u }
	h.feed([]Update{
		arrived("x", 0, "llama", "chat"),
		arrived("x", 1, "qwen", "chat"),
		m(queued("x", 2), "llama"),
		m(queued("x", 4), "qwen"),
		m(prefilling("x", 3, 5, 1), "llama"),
		m(prefilling("x", 6, 7, 0), "qwen"),
		m(decoding("x", 10, 1), "llama"),
	})
	u := decoding("x", 12, 1) // no model: two requests match
	checkRejection(t, h.tr.Record(u), u, ReasonAmbiguousRequest)
	h.feed([]Update{
		m(enFinished("x", 15, "stop"), "llama"),
		m(decoding("x", 20, 1), "qwen"),
		m(decoding("x", 25, 1), "qwen"),
		m(enFinished("x", 30, "length"), "qwen"),
	})
	if n := h.rejects(ReasonAmbiguousRequest); n != 1 {
		t.Errorf("ambiguous_request = %d, want 1", n)
	}
	llama, qwen := h.statsOfModel("x", "llama"), h.statsOfModel("x", "qwen")
	checkStats(t, llama, wantStats{
		reason: "stop", arrived: 0, finished: 15,
		e2e: 15, queue: 1, ttft: 10, prefill: 7, decode: 5, inference: 12, tpot: absent,
		prompt: absent, cached: 1, out: 1,
	})
	checkStats(t, qwen, wantStats{
		reason: "length", arrived: 1, finished: 30,
		e2e:       29, // 30 - 1
		queue:     2,  // 6 - 4
		ttft:      19, // 20 - 1
		prefill:   14, // 20 - 6
		decode:    10, // 30 - 20
		inference: 24, // 30 - 6
		tpot:      10,
		itl:       []float64{5},
		prompt:    absent, cached: 0, out: 2,
	})
	if llama.TraceID == qwen.TraceID {
		t.Error("two requests share a trace")
	}
	r1, _ := h.treeOf(llama)
	r2, _ := h.treeOf(qwen)
	if r1.Name() != "chat llama" || r2.Name() != "chat qwen" {
		t.Errorf("roots %q, %q", r1.Name(), r2.Name())
	}
	h.wantCounter(attributes.MetricRequests, 1, attributes.RequestModel.String("llama"))
	h.wantCounter(attributes.MetricRequests, 1, attributes.RequestModel.String("qwen"))
}

func TestSameIDDifferentScopes(t *testing.T) {
	h := newHarness(t)
	sc := func(u Update, scope string) Update { u.Scope = scope; return u }
	h.feed([]Update{
		sc(arrived("y", 0, "m", "chat"), "a"),
		sc(arrived("y", 0, "m", "chat"), "b"),
		sc(feFinished("y", 5, "stop"), "a"),
		sc(feFinished("y", 7, "abort"), "b"),
	})
	var a, b RequestStats
	for _, s := range h.stats {
		switch s.Scope {
		case "a":
			a = s
		case "b":
			b = s
		}
	}
	wantLatency(t, "a e2e", a.E2ELatency, 5)
	wantLatency(t, "b e2e", b.E2ELatency, 7)
	ra, _ := h.treeOf(a)
	checkAttrs(t, "root a", ra.Attributes(), []attribute.KeyValue{attributes.RequestScope.String("a")})
}

// stepScenario drives three requests' engine sides through Steps; the
// frontend records ARRIVED, INPUT_PROCESSED and FINISHED.
func stepScenario(h *harness, useStep bool) {
	h.t.Helper()
	fe := func(us ...Update) { h.feed(us) }
	step := func(s Step, singles ...Update) {
		h.t.Helper()
		if useStep {
			if err := h.tr.Step(&s); err != nil {
				h.t.Fatalf("Step at %v: %v", s.Time.Sub(base), err)
			}
			return
		}
		h.feed(singles)
		if s.Stats != nil {
			h.tr.RecordSchedulerStats(s.Time, *s.Stats)
		}
	}
	fe(arrived("A", 0, "m", "chat"), arrived("B", 1, "m", "chat"), arrived("C", 2, "m", "chat"),
		inputProcessed("A", 2.5, 10), inputProcessed("B", 2.5, 8), inputProcessed("C", 2.5, 6))
	step(Step{Time: at(3), Queued: []string{"A", "B", "C"}},
		queued("A", 3), queued("B", 3), queued("C", 3))
	step(Step{Time: at(5), Scheduled: []Scheduled{{RequestID: "A", ComputedTokens: 10, CachedTokens: 0}, {RequestID: "B", ComputedTokens: 8, CachedTokens: 4}}},
		prefilling("A", 5, 10, 0), prefilling("B", 5, 8, 4))
	step(Step{Time: at(10), Decoded: []Decoded{{RequestID: "A", NewTokens: 0}, {RequestID: "B", NewTokens: 2}}, Scheduled: []Scheduled{{RequestID: "C", ComputedTokens: 6, CachedTokens: 0}}},
		prefilling("C", 10, 6, 0), decoding("A", 10, 1), decoding("B", 10, 2))
	step(Step{Time: at(20), Decoded: []Decoded{{RequestID: "A", NewTokens: 1}, {RequestID: "B", NewTokens: 1}, {RequestID: "C", NewTokens: 1}}, Finished: []Finished{{RequestID: "B", Reason: "stop"}},
		Stats: &SchedulerStats{Running: 3, Waiting: 0, KVCacheUsage: 0.25}},
		decoding("A", 20, 1), decoding("B", 20, 1), decoding("C", 20, 1), enFinished("B", 20, "stop"))
	fe(feFinished("B", 21, "stop"))
	step(Step{Time: at(30), Preempted: []string{"A"}, Decoded: []Decoded{{RequestID: "C", NewTokens: 1}}, Finished: []Finished{{RequestID: "C", Reason: "length"}}},
		preempted("A", 30), decoding("C", 30, 1), enFinished("C", 30, "length"))
	fe(feFinished("C", 31, "length"))
	// Recompute of A: prompt 10 + 2 generated.
	step(Step{Time: at(40), Scheduled: []Scheduled{{RequestID: "A", ComputedTokens: 12, CachedTokens: 0}}, Stats: &SchedulerStats{Running: 1, Waiting: 0, KVCacheUsage: 0.1}},
		prefilling("A", 40, 12, 0))
	step(Step{Time: at(50), Decoded: []Decoded{{RequestID: "A", NewTokens: 1}}, Finished: []Finished{{RequestID: "A", Reason: "stop"}}},
		decoding("A", 50, 1), enFinished("A", 50, "stop"))
	fe(feFinished("A", 51, "stop"))
}

func TestStepAPI(t *testing.T) {
	hs := newHarness(t)
	stepScenario(hs, true)
	hu := newHarness(t)
	stepScenario(hu, false)

	want := map[string]wantStats{
		"A": {reason: "stop", arrived: 0, finished: 51,
			e2e: 51, queue: 2, ttft: 10, prefill: 5,
			decode:    41,   // 51 - 10
			inference: 46,   // 51 - 5
			tpot:      20.5, // 41 / 2
			itl:       []float64{10, 30},
			preempted: 10, // 40 - 30
			prompt:    10, cached: 0, out: 3, preemptions: 1},
		"B": {reason: "stop", arrived: 1, finished: 21,
			e2e:       20,  // 21 - 1
			queue:     2,   // 5 - 3
			ttft:      9,   // 10 - 1
			prefill:   5,   // 10 - 5
			decode:    11,  // 21 - 10
			inference: 16,  // 21 - 5
			tpot:      5.5, // 11 / (3 - 1)
			itl:       []float64{10},
			prompt:    8, cached: 4, out: 3},
		"C": {reason: "length", arrived: 2, finished: 31,
			e2e:       29, // 31 - 2
			queue:     7,  // 10 - 3
			ttft:      18, // 20 - 2
			prefill:   10, // 20 - 10
			decode:    11, // 31 - 20
			inference: 21, // 31 - 10
			tpot:      11,
			itl:       []float64{10},
			prompt:    6, cached: 0, out: 2},
	}
	for id, w := range want {
		s := hs.statsOf(id)
		checkStats(t, s, w)
		sameStats(t, s, hu.statsOf(id))
		root, kids := hs.treeOf(s)
		checkInside(t, root, kids)
	}
	for _, h := range []*harness{hs, hu} {
		if n := h.rejects(""); n != 0 {
			t.Errorf("%d rejections", n)
		}
		h.wantCounter(attributes.MetricRequests, 3)
		h.wantCounter(attributes.MetricPreemptions, 1)
		h.wantCounter(attributes.MetricGenerationTokens, 8)  // 3 + 3 + 2
		h.wantCounter(attributes.MetricPromptTokens, 24)     // 10 + 8 + 6
		h.wantHist(attributes.MetricTimeToFirstToken, 3, 37) // 10 + 9 + 18
		if v, ok := h.gaugeInt(attributes.MetricRequestsRunning); !ok || v != 1 {
			t.Errorf("running gauge = %d, %v; want 1", v, ok)
		}
		if v, ok := h.gaugeInt(attributes.MetricRequestsWaiting); !ok || v != 0 {
			t.Errorf("waiting gauge = %d, %v; want 0", v, ok)
		}
		if v, ok := h.gaugeFloat(attributes.MetricKVCacheUsage); !ok || v != 0.1 {
			t.Errorf("kv gauge = %v, %v; want 0.1", v, ok)
		}
	}
}

func TestStepRejections(t *testing.T) {
	h := newHarness(t)
	h.feed([]Update{arrived("ok", 0, "m", "chat"), arrived("bad", 0, "m", "chat"), queued("ok", 1), queued("bad", 1)})
	// "bad" decodes before any PREFILLING; "ok" is scheduled in the same step.
	err := h.tr.Step(&Step{Time: at(2),
		Scheduled: []Scheduled{{RequestID: "ok", ComputedTokens: 3, CachedTokens: 0}, {RequestID: "bad", ComputedTokens: 3, CachedTokens: 5}}, // bad: 5 cached > 3 computed
		Decoded:   []Decoded{{RequestID: "bad", NewTokens: 1}, {RequestID: "ok", NewTokens: -1}},                                              // ok: negative count
	})
	if !errors.Is(err, ErrRejected) || !errors.Is(err, ReasonCachedExceedsComputed) ||
		!errors.Is(err, ReasonBadTransition) || !errors.Is(err, ReasonNegativeCount) {
		t.Fatalf("Step error %v does not carry all three rejections", err)
	}
	var re *RejectError
	if !errors.As(err, &re) || re.RequestID != "bad" || re.Kind != KindPrefilling {
		t.Errorf("first RejectError = %+v", re)
	}
	if n := h.rejects(""); n != 3 {
		t.Errorf("rejections = %d, want 3", n)
	}
	// "ok" was scheduled: it decodes next step and finishes.
	if err := h.tr.Step(&Step{Time: at(4), Decoded: []Decoded{{RequestID: "ok", NewTokens: 1}}, Finished: []Finished{{RequestID: "ok", Reason: "stop"}, {RequestID: "bad", Reason: "abort"}}}); err != nil {
		t.Fatal(err)
	}
	wantLatency(t, "ok ttft", h.statsOf("ok").FirstTokenLatency, 4)
	wantLatency(t, "ok queue", h.statsOf("ok").QueueDuration, 1)
	wantLatency(t, "bad queue", h.statsOf("bad").QueueDuration, absent)

	// More than eight rejections: all counted, eight in the error.
	many := &Step{Time: at(5)}
	for range 12 {
		many.Decoded = append(many.Decoded, Decoded{RequestID: "ok", NewTokens: 1})
	}
	err = h.tr.Step(many)
	if got := len(err.(interface{ Unwrap() []error }).Unwrap()); got != 8 {
		t.Errorf("Step error joins %d, want 8", got)
	}
	if n := h.rejects(ReasonAfterFinished); n != 12 {
		t.Errorf("after_finished = %d, want 12", n)
	}
}

func TestRequestHandle(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	parent := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled, Remote: true})
	q, err := h.tr.Arrive(trace.ContextWithRemoteSpanContext(ctx, parent), "h1", Arrival{Time: at(0), Model: "llama-3-8b"})
	if err != nil {
		t.Fatal(err)
	}
	if q.ID() != "h1" || !q.SpanContext().IsValid() || q.SpanContext().TraceID() != parent.TraceID() {
		t.Fatalf("handle: id %q, span context %v", q.ID(), q.SpanContext())
	}
	if got := trace.SpanContextFromContext(q.Context(ctx)); !got.Equal(q.SpanContext()) {
		t.Errorf("Context carries %v, want %v", got, q.SpanContext())
	}
	mustNil := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	mustNil(q.InputProcessed(at(1), 7, &SamplingParams{Temperature: f64(0.2), TopP: f64(0.9), Stop: []string{"\n"}}))
	h.feed([]Update{queued("h1", 2), prefilling("h1", 3, 7, 0), decoding("h1", 10, 1)})
	mustNil(q.Detokenized(at(11), 1, 100*us))
	h.must(decoding("h1", 20, 1))
	mustNil(q.Detokenized(at(21), 1, 100*us))
	h.must(enFinished("h1", 20, "stop"))
	mustNil(q.Finish(at(22), "stop"))

	s := h.statsOf("h1")
	checkStats(t, s, wantStats{
		reason: "stop", arrived: 0, finished: 22,
		e2e: 22, queue: 1, ttft: 11, prefill: 8, decode: 11, inference: 19, tpot: 11,
		itl: []float64{10}, prompt: 7, cached: 0, out: 2,
	})
	root, kids := h.treeOf(s)
	// The root has the span context handed out at arrival and the
	// incoming parent.
	if root.SpanContext().SpanID() != q.SpanContext().SpanID() || root.SpanContext().TraceID() != parent.TraceID() {
		t.Errorf("root %v, handle %v", root.SpanContext(), q.SpanContext())
	}
	if root.Parent().SpanID() != parent.SpanID() || !root.Parent().IsRemote() {
		t.Errorf("root parent %v, want remote %v", root.Parent(), parent.SpanID())
	}
	checkAttrs(t, "root", root.Attributes(), []attribute.KeyValue{
		attributes.RequestTemperature.Float64(0.2),
		attributes.RequestTopP.Float64(0.9),
		attributes.RequestStopSequences.StringSlice([]string{"\n"}),
	})
	checkAttrs(t, "detokenize", kids[len(kids)-1].Attributes(), []attribute.KeyValue{attributes.DetokenizeBusyTime.Float64(0.0002)})

	// After the finish, the handle's methods are rejected.
	if err := q.Detokenized(at(23), 1, 0); !errors.Is(err, ReasonAfterFinished) {
		t.Errorf("Detokenized after finish: %v", err)
	}
	if err := q.Record(Update{Kind: KindArrived, Time: at(23)}); !errors.Is(err, ReasonDuplicateArrival) {
		t.Errorf("ARRIVED through a handle: %v", err)
	}

	t.Run("Abort", func(t *testing.T) {
		q, _ := h.tr.Arrive(ctx, "h2", Arrival{Time: at(0), Model: "m", Operation: "embeddings"})
		mustNil(q.Abort(at(5)))
		// The engine is present (it reported for h1 a moment ago), so
		// the request waits, within the grace, for its late updates
		// (SPEC §1); the log's end ends the wait.
		if len(h.stats) != 1 {
			t.Fatal("the abort did not wait for the present engine")
		}
		h.tr.Flush()
		s := h.statsOf("h2")
		checkStats(t, s, wantStats{reason: "abort", errType: "abort", finished: 5, e2e: 5,
			queue: absent, ttft: absent, prefill: absent, decode: absent, inference: absent, tpot: absent,
			prompt: absent, cached: absent})
		root, _ := h.treeOf(s)
		if root.Name() != "embeddings m" || root.Status().Code != codes.Error {
			t.Errorf("root %q status %v", root.Name(), root.Status())
		}
	})
	t.Run("Fail", func(t *testing.T) {
		q, _ := h.tr.Arrive(ctx, "h3", Arrival{Time: at(0), Model: "m"})
		mustNil(q.InputProcessed(at(1), 3, nil))
		mustNil(q.Fail(at(3), "timeout"))
		h.tr.Flush() // the wait for the present engine, as in Abort
		s := h.statsOf("h3")
		if s.FinishReason != "error" || s.ErrorType != "timeout" {
			t.Errorf("finish %q error.type %q", s.FinishReason, s.ErrorType)
		}
		root, _ := h.treeOf(s)
		if root.Status().Code != codes.Error || root.Status().Description != "timeout" {
			t.Errorf("root status %v", root.Status())
		}
		h.wantHist(attributes.MetricRequestDuration, 1, 3, attributes.ErrorType.String("timeout"))
		h.wantCounter(attributes.MetricRequests, 1, attributes.FinishReason.String("error"))
	})
	t.Run("rejected arrival", func(t *testing.T) {
		q, err := h.tr.Arrive(ctx, "h4", Arrival{Time: at(0)}) // no model
		if !errors.Is(err, ReasonMissingPayload) {
			t.Fatalf("Arrive without model: %v", err)
		}
		if err := q.Finish(at(1), "stop"); !errors.Is(err, ReasonUnknownRequest) {
			t.Errorf("handle of a rejected arrival: %v", err)
		}
		if q.ID() != "" || q.SpanContext().IsValid() {
			t.Error("rejected handle has an id or span context")
		}
	})
}

// Arrival.Link: the root starts a trace of its own and links to the given
// span (an untrusted caller's) instead of joining its trace.
func TestArrivalLink(t *testing.T) {
	h := newHarness(t)
	caller := trace.NewSpanContext(trace.SpanContextConfig{TraceID: spans.NewTraceID(), SpanID: spans.NewSpanID(), Remote: true})
	q, err := h.tr.Arrive(context.Background(), "l", Arrival{Time: at(0), Model: "m", Link: caller})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Finish(at(3), "stop"); err != nil {
		t.Fatal(err)
	}
	root, _ := h.treeOf(h.statsOf("l"))
	if root.SpanContext().TraceID() == caller.TraceID() || root.Parent().IsValid() {
		t.Fatalf("root %v parent %v joined the caller's trace", root.SpanContext(), root.Parent())
	}
	if ls := root.Links(); len(ls) != 1 || !ls[0].SpanContext.Equal(caller) {
		t.Fatalf("root links %v, want one to %v", ls, caller)
	}
}

// A decode named by id takes the fast path only where record would do the
// same; everything else (no such request, two of that name, a name record
// would cut, a wrong transition) gets record's answer and counts.
func TestStepDecodedByIDAsRecord(t *testing.T) {
	long := strings.Repeat("m", MaxModelLength+1)
	scoped := func(u Update, scope, model string) Update { u.Scope, u.Model = scope, model; return u }
	setup := []Update{
		scoped(arrived("x", 0, "m", "chat"), "a", "m"), scoped(arrived("x", 0, "m", "chat"), "b", "m"),
		scoped(queued("x", 1), "a", ""), scoped(queued("x", 1), "b", ""),
		scoped(prefilling("x", 2, 4, 0), "a", ""), scoped(prefilling("x", 2, 4, 0), "b", ""),
		arrived("q", 0, "m", "chat"), queued("q", 1),
		arrived("y", 0, "m", "chat"), queued("y", 1), prefilling("y", 2, 4, 0),
	}
	for _, tc := range []struct {
		name         string
		scope, model string
		id           string
		reason       Reason // "" when it applies
	}{
		{name: "scoped", scope: "a", id: "x"},
		{name: "two of that name", id: "x", reason: ReasonAmbiguousRequest},
		{name: "still queued", id: "q", reason: ReasonBadTransition},
		{name: "model record cuts", model: long, id: "y"}, // cut, it names no request: held
		{name: "id too long", id: strings.Repeat("i", MaxIDLength+1), reason: ReasonTooLong},
		{name: "plain", id: "y"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hs, hu := newHarness(t), newHarness(t)
			hs.feed(setup)
			hu.feed(setup)
			serr := hs.tr.Step(&Step{Time: at(3), Scope: tc.scope, Model: tc.model, Decoded: []Decoded{{RequestID: tc.id, NewTokens: 2}}})
			uerr := hu.tr.Record(scoped(decoding(tc.id, 3, 2), tc.scope, tc.model))
			for _, c := range []struct {
				how string
				h   *harness
				err error
			}{{"Step", hs, serr}, {"Record", hu, uerr}} {
				if tc.reason == "" && c.err != nil || tc.reason != "" && !errors.Is(c.err, tc.reason) {
					t.Errorf("%s: %v, want %q", c.how, c.err, tc.reason)
				}
				if n := c.h.rejects(""); tc.reason != "" && n != 1 || tc.reason == "" && n != 0 {
					t.Errorf("%s: %d rejections", c.how, n)
				}
				_ = c.h.tr.Record(scoped(enFinished(tc.id, 4, "stop"), tc.scope, ""))
				_ = c.h.tr.Record(scoped(feFinished(tc.id, 5, "stop"), tc.scope, ""))
			}
			if tc.reason == "" {
				sameStats(t, hs.statsOfModel(tc.id, "m"), hu.statsOfModel(tc.id, "m"))
			}
		})
	}
}
