package spans

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/attributes"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// ms is t0 + n milliseconds in Unix nanoseconds; ms(-1) is 0 ("never
// happened").
func ms(n float64) int64 {
	if n < 0 {
		return 0
	}
	return t0.Add(time.Duration(n * float64(time.Millisecond))).UnixNano()
}

func msOf(ns int64) float64 { return float64(ns-t0.UnixNano()) / 1e6 }

// want is one expected span: name, [start, end] in ms, and some attributes.
type want struct {
	name       string
	start, end float64
	attrs      []attribute.KeyValue
	events     []float64 // event times, ms
}

func root(s, e float64) want { return want{name: "chat m", start: s, end: e} }
func input(s, e float64) want {
	return want{name: attributes.SpanInputProcessing, start: s, end: e}
}
func handoff(s, e float64) want { return want{name: attributes.SpanHandoff, start: s, end: e} }
func queue(s, e float64, reason string) want {
	return want{name: attributes.SpanQueue, start: s, end: e, attrs: []attribute.KeyValue{attributes.QueueReason.String(reason)}}
}
func prefill(s, e float64, recompute bool, chunks int, events ...float64) want {
	return want{name: attributes.SpanPrefill, start: s, end: e, events: events, attrs: []attribute.KeyValue{
		attributes.PrefillRecompute.Bool(recompute), attributes.PrefillChunks.Int(chunks)}}
}
func decode(s, e float64, segment, tokens int) want {
	return want{name: attributes.SpanDecode, start: s, end: e, attrs: []attribute.KeyValue{
		attributes.DecodeSegment.Int(segment), attributes.DecodeOutputTokens.Int(tokens)}}
}
func detokenize(s, e float64) want { return want{name: attributes.SpanDetokenize, start: s, end: e} }

func run(start, first, preempted float64, tokens int) Run {
	return Run{Start: ms(start), FirstToken: ms(first), Preempted: ms(preempted), Chunks: 1, OutputTokens: tokens}
}

func TestBuild(t *testing.T) {
	cases := []struct {
		name    string
		tl      Timeline
		want    []want
		clamped int
	}{
		{
			name: "one run, every phase",
			tl: Timeline{Start: ms(0), End: ms(50), EngineEnd: ms(45), InputProcessed: ms(2), InputTokens: 12,
				FirstQueued: ms(3), Runs: []Run{run(7, 26, -1, 3)},
				Detokenize: &Detokenize{First: ms(26), Last: ms(46), Busy: 2 * time.Millisecond, Deliveries: 3}},
			want: []want{root(0, 50), input(0, 2), handoff(2, 3), queue(3, 7, "new"), prefill(7, 26, false, 1),
				decode(26, 45, 0, 3), // ends at the engine's end, not the root's
				detokenize(26, 46)},
		},
		{
			name: "no engine end: the run ends with the request",
			tl:   Timeline{Start: ms(0), End: ms(40), FirstQueued: ms(1), Runs: []Run{run(2, 10, -1, 4)}},
			want: []want{root(0, 40), queue(1, 2, "new"), prefill(2, 10, false, 1), decode(10, 40, 0, 4)},
		},
		{
			name: "preempted during decode, resumed",
			tl: Timeline{Start: ms(0), End: ms(72), EngineEnd: ms(70), FirstQueued: ms(2),
				Runs: []Run{run(5, 21, 35, 2), run(50, 61, -1, 2)}},
			want: []want{root(0, 72), queue(2, 5, "new"),
				prefill(5, 21, false, 1), decode(21, 35, 0, 2), queue(35, 50, "preempted"),
				prefill(50, 61, true, 1), decode(61, 70, 1, 2)},
		},
		{
			name: "preempted during prefill: no decode segment for that run",
			tl: Timeline{Start: ms(0), End: ms(75), EngineEnd: ms(70), FirstQueued: ms(2),
				Runs: []Run{run(4, -1, 10, 0), run(30, 50, -1, 3)}},
			want: []want{root(0, 75), queue(2, 4, "new"),
				prefill(4, 10, false, 1), queue(10, 30, "preempted"),
				prefill(30, 50, true, 1), decode(50, 70, 0, 3)}, // segment 0: the first with tokens
		},
		{
			name: "two preemptions",
			tl: Timeline{Start: ms(0), End: ms(95), EngineEnd: ms(95), FirstQueued: ms(1),
				Runs: []Run{run(2, 10, 25, 2), run(40, 50, 55, 1), run(70, 80, -1, 2)}},
			want: []want{root(0, 95), queue(1, 2, "new"),
				prefill(2, 10, false, 1), decode(10, 25, 0, 2), queue(25, 40, "preempted"),
				prefill(40, 50, true, 1), decode(50, 55, 1, 1), queue(55, 70, "preempted"),
				prefill(70, 80, true, 1), decode(80, 95, 2, 2)},
		},
		{
			name: "preempted and never resumed: the wait runs to the engine's end",
			tl: Timeline{Start: ms(0), End: ms(30), EngineEnd: ms(25), FirstQueued: ms(1),
				Runs: []Run{run(4, 10, 20, 1)}},
			want: []want{root(0, 30), queue(1, 4, "new"), prefill(4, 10, false, 1), decode(10, 20, 0, 1),
				queue(20, 25, "preempted")},
		},
		{
			name: "queued, never scheduled (abort)",
			tl:   Timeline{Start: ms(0), End: ms(10), EngineEnd: ms(9), InputProcessed: ms(1), InputTokens: -1, FirstQueued: ms(2)},
			want: []want{root(0, 10), input(0, 1), handoff(1, 2), queue(2, 9, "new")},
		},
		{
			name: "scheduled, no token (abort during prefill)",
			tl:   Timeline{Start: ms(0), End: ms(10), EngineEnd: ms(8), FirstQueued: ms(2), Runs: []Run{run(3, -1, -1, 0)}},
			want: []want{root(0, 10), queue(2, 3, "new"), prefill(3, 8, false, 1)},
		},
		{
			name: "root only",
			tl:   Timeline{Start: ms(0), End: ms(5)},
			want: []want{root(0, 5)},
		},
		{
			name: "chunk events, one after the prefill's end clamped into it",
			tl: Timeline{Start: ms(0), End: ms(42), EngineEnd: ms(40), FirstQueued: ms(2),
				Runs: []Run{{Start: ms(4), FirstToken: ms(31), Chunks: 4, OutputTokens: 2,
					ChunkEvents: []ChunkEvent{{ms(14), 256}, {ms(24), 300}, {ms(35), 310}}}}},
			want: []want{root(0, 42), queue(2, 4, "new"), prefill(4, 31, false, 4, 14, 24, 31), decode(31, 40, 0, 2)},
			// Events are clamped into their span, not counted as spans.
		},

		// Clamping (SPEC §5): children stay inside the root, counted.
		{
			name:    "engine instants before ARRIVED (skew)",
			tl:      Timeline{Start: ms(10), End: ms(41), EngineEnd: ms(41), FirstQueued: ms(5), Runs: []Run{run(7, 40, -1, 1)}},
			want:    []want{root(10, 41), queue(10, 10, "new"), prefill(10, 40, false, 1), decode(40, 41, 0, 1)},
			clamped: 2, // queue [5,7] and prefill [7,40]
		},
		{
			name:    "engine end after the request's end",
			tl:      Timeline{Start: ms(0), End: ms(20), EngineEnd: ms(30), FirstQueued: ms(1), Runs: []Run{run(2, 10, -1, 2)}},
			want:    []want{root(0, 20), queue(1, 2, "new"), prefill(2, 10, false, 1), decode(10, 20, 0, 2)},
			clamped: 1,
		},
		{
			name:    "first token before its run's start: no negative prefill",
			tl:      Timeline{Start: ms(0), End: ms(20), FirstQueued: ms(1), Runs: []Run{run(8, 5, -1, 1)}},
			want:    []want{root(0, 20), queue(1, 8, "new"), prefill(8, 8, false, 1), decode(5, 20, 0, 1)},
			clamped: 1,
		},
		{
			name:    "deliveries after the root's end",
			tl:      Timeline{Start: ms(0), End: ms(20), Detokenize: &Detokenize{First: ms(25), Last: ms(30)}},
			want:    []want{root(0, 20), detokenize(20, 20)},
			clamped: 1,
		},
		{
			name: "root ends before it starts",
			tl: Timeline{Start: ms(10), End: ms(5), InputProcessed: ms(12), FirstQueued: ms(11),
				Runs: []Run{run(12, 13, -1, 1)}},
			// root clamped to [10,10] (1), input (1), queue (1), prefill (1), decode (1)
			want:    []want{root(10, 10), input(10, 10), queue(10, 10, "new"), prefill(10, 10, false, 1), decode(10, 10, 0, 1)},
			clamped: 5,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.tl.Name = "chat m"
			var tr Tree
			Build(&c.tl, &tr)
			checkTree(t, &tr, c.want)
			if tr.Clamped != c.clamped {
				t.Errorf("Clamped = %d, want %d", tr.Clamped, c.clamped)
			}
			// Reusing a tree gives the same result.
			tr.Reset()
			Build(&c.tl, &tr)
			checkTree(t, &tr, c.want)
		})
	}
}

func checkTree(t *testing.T, tr *Tree, ws []want) {
	t.Helper()
	if len(tr.Spans) != len(ws) {
		var got []string
		for _, s := range tr.Spans {
			got = append(got, fmt.Sprintf("%s[%v,%v]", s.Name, msOf(s.Start), msOf(s.End)))
		}
		t.Fatalf("spans %v, want %d", got, len(ws))
	}
	for i, w := range ws {
		s := tr.Spans[i]
		kind := trace.SpanKindInternal
		if i == 0 {
			kind = trace.SpanKindServer
		}
		if s.Name != w.name || s.Kind != kind || msOf(s.Start) != w.start || msOf(s.End) != w.end {
			t.Errorf("span %d = %s %v [%v, %v], want %s %v [%v, %v]", i, s.Name, s.Kind, msOf(s.Start), msOf(s.End), w.name, kind, w.start, w.end)
		}
		for _, kv := range w.attrs {
			found := false
			for _, a := range s.Attrs {
				if a.Key == kv.Key {
					found = true
					if a.Value != kv.Value {
						t.Errorf("span %d %s: %s = %s, want %s", i, s.Name, kv.Key, a.Value.String(), kv.Value.String())
					}
				}
			}
			if !found {
				t.Errorf("span %d %s: no %s", i, s.Name, kv.Key)
			}
		}
		if len(s.Events) != len(w.events) {
			t.Errorf("span %d %s: %d events, want %d", i, s.Name, len(s.Events), len(w.events))
		} else {
			for j, at := range w.events {
				if msOf(s.Events[j].Time) != at {
					t.Errorf("span %d event %d at %v, want %v", i, j, msOf(s.Events[j].Time), at)
				}
			}
		}
	}
	checkInvariants(t, tr)
}

// checkInvariants: children inside the root, no negative duration, events
// inside their span.
func checkInvariants(t *testing.T, tr *Tree) {
	t.Helper()
	r := tr.Spans[0]
	if r.End < r.Start {
		t.Errorf("root [%v, %v] negative", r.Start, r.End)
	}
	for _, s := range tr.Spans[1:] {
		if s.End < s.Start {
			t.Errorf("%s negative: [%v, %v]", s.Name, msOf(s.Start), msOf(s.End))
		}
		if s.Start < r.Start || s.End > r.End {
			t.Errorf("%s [%v, %v] outside root [%v, %v]", s.Name, msOf(s.Start), msOf(s.End), msOf(r.Start), msOf(r.End))
		}
		for _, e := range s.Events {
			if e.Time < s.Start || e.Time > s.End {
				t.Errorf("%s event at %v outside [%v, %v]", s.Name, msOf(e.Time), msOf(s.Start), msOf(s.End))
			}
		}
	}
}

// TestBuildRandomTimelines: whatever the instants (any order, any skew,
// missing ones), Build keeps every child inside the root and never emits a
// negative duration; with every instant inside the root and in order,
// nothing is clamped.
func TestBuildRandomTimelines(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 3))
	tm := func() int64 {
		if rng.IntN(6) == 0 {
			return 0
		}
		return ms(float64(rng.IntN(200)))
	}
	var tr Tree
	for i := 0; i < 20000; i++ {
		tl := Timeline{Name: "chat m", Start: ms(float64(rng.IntN(100))), End: ms(float64(rng.IntN(200))),
			EngineEnd: tm(), InputProcessed: tm(), FirstQueued: tm(), InputTokens: rng.IntN(3) - 1}
		for range rng.IntN(4) {
			r := Run{Start: ms(float64(rng.IntN(200))), FirstToken: tm(), Chunks: 1}
			if rng.IntN(2) == 0 {
				r.Preempted = tm()
			}
			for range rng.IntN(3) {
				r.ChunkEvents = append(r.ChunkEvents, ChunkEvent{Time: tm()})
			}
			tl.Runs = append(tl.Runs, r)
		}
		if rng.IntN(2) == 0 {
			tl.Detokenize = &Detokenize{First: tm(), Last: tm()}
		}
		tr.Reset()
		Build(&tl, &tr)
		checkInvariants(t, &tr)
		if t.Failed() {
			t.Fatalf("timeline %d: %+v", i, tl)
		}
	}

	// An ordered timeline inside its root is never clamped.
	for i := 0; i < 2000; i++ {
		var ts []float64
		for range 12 {
			ts = append(ts, float64(rng.IntN(1000)))
		}
		sortFloats(ts)
		tl := Timeline{Name: "chat m", Start: ms(ts[0]), InputProcessed: ms(ts[1]), FirstQueued: ms(ts[2]),
			Runs: []Run{
				{Start: ms(ts[3]), FirstToken: ms(ts[4]), Preempted: ms(ts[6])},
				{Start: ms(ts[7]), FirstToken: ms(ts[8])},
			},
			Detokenize: &Detokenize{First: ms(ts[5]), Last: ms(ts[9])},
			EngineEnd:  ms(ts[10]), End: ms(ts[11])}
		tr.Reset()
		Build(&tl, &tr)
		if tr.Clamped != 0 {
			t.Fatalf("ordered timeline %v clamped %d", ts, tr.Clamped)
		}
	}
}

func sortFloats(a []float64) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

// TestResetDropsPreviousAttributes: a reused tree carries nothing over.
func TestResetDropsPreviousAttributes(t *testing.T) {
	var tr Tree
	big := Timeline{Name: "chat m", Start: ms(0), End: ms(50), Status: codes.Error, StatusDesc: "abort",
		RootAttrs:   []attribute.KeyValue{attributes.ErrorType.String("abort")},
		FirstQueued: ms(1), Runs: []Run{run(2, 10, 20, 1), run(30, 40, -1, 1)}}
	Build(&big, &tr)
	tr.Reset()
	small := Timeline{Name: "chat m", Start: ms(0), End: ms(5)}
	Build(&small, &tr)
	if len(tr.Spans) != 1 || len(tr.Spans[0].Attrs) != 0 || tr.Spans[0].Status != codes.Unset || tr.Clamped != 0 {
		t.Fatalf("reused tree: %+v", tr.Spans)
	}
}

func TestEmit(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithIDGenerator(IDGenerator()))
	tracer := tp.Tracer("test")
	tid, sid := NewTraceID(), NewSpanID()
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{9}, TraceFlags: trace.FlagsSampled, Remote: true})
	tl := Timeline{Name: "chat m", TraceID: tid, SpanID: sid, Parent: parent,
		Start: ms(0), End: ms(30), Status: codes.Error, StatusDesc: "abort",
		FirstQueued: ms(1), Runs: []Run{{Start: ms(2), FirstToken: ms(10), Chunks: 2,
			ChunkEvents: []ChunkEvent{{ms(5), 7}}}}}
	var tr Tree
	Build(&tl, &tr)

	// A span already in ctx must not become the root's parent.
	_, other := tp.Tracer("x").Start(context.Background(), "unrelated")
	ctx := trace.ContextWithSpan(context.Background(), other)
	sc := tr.Emit(ctx, tracer)
	if sc.TraceID() != tid || sc.SpanID() != sid {
		t.Errorf("root context %v, want preset %v/%v", sc, tid, sid)
	}
	ended := rec.Ended()
	if len(ended) != 4 { // queue, prefill, decode, root
		t.Fatalf("%d spans ended, want 4", len(ended))
	}
	r := ended[len(ended)-1]
	if r.Parent().SpanID() != parent.SpanID() || !r.Parent().IsRemote() {
		t.Errorf("root parent %v, want the remote %v", r.Parent(), parent)
	}
	if r.Status().Code != codes.Error || r.Status().Description != "abort" {
		t.Errorf("root status %v", r.Status())
	}
	if r.StartTime().UnixNano() != ms(0) || r.EndTime().UnixNano() != ms(30) || r.SpanKind() != trace.SpanKindServer {
		t.Errorf("root [%v, %v] %v", r.StartTime(), r.EndTime(), r.SpanKind())
	}
	for i, c := range ended[:3] {
		if c.Parent().SpanID() != sid || c.SpanContext().TraceID() != tid || c.SpanContext().SpanID() == sid {
			t.Errorf("child %s: parent %v, ids %v", c.Name(), c.Parent().SpanID(), c.SpanContext())
		}
		w := tr.Spans[i+1]
		if c.Name() != w.Name || c.StartTime().UnixNano() != w.Start || c.EndTime().UnixNano() != w.End || c.SpanKind() != trace.SpanKindInternal {
			t.Errorf("child %d: %s [%v, %v], want %s [%v, %v]", i, c.Name(), c.StartTime(), c.EndTime(), w.Name, w.Start, w.End)
		}
	}
	if evs := ended[1].Events(); len(evs) != 1 || evs[0].Time.UnixNano() != ms(5) || evs[0].Name != attributes.EventPrefillChunk {
		t.Errorf("prefill events %+v", evs)
	}

	t.Run("unsampled root: children are not even started", func(t *testing.T) {
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.NeverSample()))
		var tr Tree
		tl := tl
		tl.Parent = trace.SpanContext{}
		Build(&tl, &tr)
		sc := tr.Emit(context.Background(), tp.Tracer("t"))
		if n := len(rec.Started()) + len(rec.Ended()); n != 0 {
			t.Errorf("%d spans recorded", n)
		}
		if sc.IsSampled() {
			t.Error("root sampled")
		}
	})
	t.Run("empty tree", func(t *testing.T) {
		var tr Tree
		if sc := tr.Emit(context.Background(), tracer); sc.IsValid() {
			t.Errorf("empty tree emitted %v", sc)
		}
	})
}

func TestIDs(t *testing.T) {
	seen := map[trace.SpanID]bool{}
	for range 1000 {
		tid, sid := NewTraceID(), NewSpanID()
		if !tid.IsValid() || !sid.IsValid() || seen[sid] {
			t.Fatalf("bad or repeated ids %v %v", tid, sid)
		}
		seen[sid] = true
	}
	g := IDGenerator()
	tid, sid := NewTraceID(), NewSpanID()
	ctx := withPresetIDs(context.Background(), tid, sid)
	if a, b := g.NewIDs(ctx); a != tid || b != sid {
		t.Errorf("NewIDs with preset = %v %v", a, b)
	}
	if s := g.NewSpanID(ctx, tid); s != sid {
		t.Errorf("NewSpanID with preset = %v", s)
	}
	if s := g.NewSpanID(ctx, NewTraceID()); s == sid {
		t.Error("preset span id used for another trace")
	}
	if a, b := g.NewIDs(context.Background()); !a.IsValid() || !b.IsValid() || a == tid {
		t.Errorf("NewIDs without preset = %v %v", a, b)
	}
}
