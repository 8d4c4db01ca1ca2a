package spans

import (
	"context"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestExportMatchesEmit builds trees from random timelines and checks that
// Export hands the processor exactly what Emit through an SDK Tracer ends:
// every field of every span, in the same order, except the children's
// randomly drawn span ids.
func TestExportMatchesEmit(t *testing.T) {
	res := resource.NewSchemaless(attribute.String("service.name", "export-test"))
	scope := instrumentation.Scope{Name: "github.com/llmtrace/llmtrace/otelstats", Version: "v9"}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		tl := randomTimeline(rng)
		tl.TraceID, tl.SpanID = NewTraceID(), NewSpanID()
		if i%3 == 0 {
			ts, _ := trace.ParseTraceState("vendor=x")
			flags := trace.FlagsSampled
			if i%2 == 0 {
				flags |= trace.FlagsRandom // W3C level 2: it goes on down the trace
			}
			tl.Parent = trace.NewSpanContext(trace.SpanContextConfig{TraceID: tl.TraceID, SpanID: NewSpanID(), TraceFlags: flags, TraceState: ts, Remote: true})
		}
		if i%5 == 2 {
			tl.Link = trace.NewSpanContext(trace.SpanContextConfig{TraceID: NewTraceID(), SpanID: NewSpanID(), Remote: true})
		}
		if i%4 == 1 {
			tl.Status, tl.StatusDesc = codes.Error, "abort"
		}
		if i%4 == 2 {
			tl.Status, tl.StatusDesc = codes.Ok, "dropped by the SDK"
		}
		tl.RootAttrs = []attribute.KeyValue{attribute.String("gen_ai.request.model", "m"), attribute.Int("n", i)}
		var tr Tree
		Build(&tl, &tr)

		viaTracer := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(viaTracer), sdktrace.WithIDGenerator(IDGenerator()), sdktrace.WithResource(res))
		want := tr.Emit(context.Background(), tp.Tracer(scope.Name, trace.WithInstrumentationVersion(scope.Version)))

		direct := tracetest.NewSpanRecorder()
		got := tr.Export(direct, &Source{Resource: res, Scope: scope})
		if !got.Equal(want) {
			t.Fatalf("timeline %d: root context %v, want %v", i, got, want)
		}
		a, b := direct.Ended(), viaTracer.Ended()
		if len(a) != len(b) {
			t.Fatalf("timeline %d: %d spans, want %d", i, len(a), len(b))
		}
		ids := map[trace.SpanID]bool{}
		for j := range a {
			compareSpan(t, i, a[j], b[j])
			if ids[a[j].SpanContext().SpanID()] {
				t.Fatalf("timeline %d: span id repeated", i)
			}
			ids[a[j].SpanContext().SpanID()] = true
		}
		if len(direct.Started()) != 0 {
			t.Fatalf("Export called OnStart")
		}
	}
}

func compareSpan(t *testing.T, i int, got, want sdktrace.ReadOnlySpan) {
	t.Helper()
	isRoot := !want.Parent().IsValid() || want.Parent().IsRemote()
	gsc, wsc := got.SpanContext(), want.SpanContext()
	if isRoot {
		if !gsc.Equal(wsc) {
			t.Errorf("timeline %d %s: span context %v, want %v", i, want.Name(), gsc, wsc)
		}
	} else if gsc.TraceID() != wsc.TraceID() || gsc.TraceFlags() != wsc.TraceFlags() || gsc.TraceState().String() != wsc.TraceState().String() || !gsc.SpanID().IsValid() {
		t.Errorf("timeline %d %s: span context %v, want like %v", i, want.Name(), gsc, wsc)
	}
	checks := []struct {
		what      string
		got, want any
	}{
		{"name", got.Name(), want.Name()},
		{"parent", got.Parent(), want.Parent()},
		{"kind", got.SpanKind(), want.SpanKind()},
		{"start", got.StartTime().UnixNano(), want.StartTime().UnixNano()},
		{"end", got.EndTime().UnixNano(), want.EndTime().UnixNano()},
		{"attributes", attribute.NewSet(got.Attributes()...), attribute.NewSet(want.Attributes()...)},
		{"events", normEvents(got.Events()), normEvents(want.Events())},
		{"links", linkContexts(got.Links()), linkContexts(want.Links())},
		{"status", got.Status(), want.Status()},
		{"scope", got.InstrumentationScope(), want.InstrumentationScope()},
		//lint:ignore SA1019 still part of the interface
		{"library", got.InstrumentationLibrary(), want.InstrumentationLibrary()},
		{"resource", got.Resource().Equivalent(), want.Resource().Equivalent()},
		{"dropped", [3]int{got.DroppedAttributes(), got.DroppedEvents(), got.DroppedLinks()}, [3]int{want.DroppedAttributes(), want.DroppedEvents(), want.DroppedLinks()}},
		{"children", got.ChildSpanCount(), want.ChildSpanCount()},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("timeline %d %s: %s %v, want %v", i, want.Name(), c.what, c.got, c.want)
		}
	}
}

type normEvent struct {
	name  string
	time  int64
	attrs attribute.Distinct
}

func normEvents(evs []sdktrace.Event) []normEvent {
	var out []normEvent
	for _, e := range evs {
		out = append(out, normEvent{e.Name, e.Time.UnixNano(), attrSet(e.Attributes).Equivalent()})
	}
	return out
}

func attrSet(kv []attribute.KeyValue) *attribute.Set {
	s := attribute.NewSet(kv...)
	return &s
}

func TestExportEmpty(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	var tr Tree
	if sc := tr.Export(rec, &Source{Resource: resource.Empty()}); sc.IsValid() || len(rec.Ended()) != 0 {
		t.Errorf("empty tree exported %v", sc)
	}
	tl := Timeline{Name: "chat m", Start: ms(0), End: ms(1)}
	Build(&tl, &tr)
	if sc := tr.Export(nil, &Source{}); sc.IsValid() {
		t.Errorf("nil processor: %v", sc)
	}
	// No preset ids: fresh, valid ones.
	if sc := tr.Export(rec, &Source{Resource: resource.Empty()}); !sc.TraceID().IsValid() || !sc.SpanID().IsValid() || !sc.IsSampled() {
		t.Errorf("root context %v", sc)
	}
}

func BenchmarkExport(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	tl := randomTimeline(rng)
	tl.TraceID, tl.SpanID = NewTraceID(), NewSpanID()
	var tr Tree
	Build(&tl, &tr)
	src := &Source{Resource: resource.Empty()}
	var sink discard
	b.ReportAllocs()
	for b.Loop() {
		tr.Export(&sink, src)
	}
	b.ReportMetric(float64(len(tr.Spans)), "spans/tree")
}

func BenchmarkEmit(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	tl := randomTimeline(rng)
	tl.TraceID, tl.SpanID = NewTraceID(), NewSpanID()
	var tr Tree
	Build(&tl, &tr)
	var sink discard
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(&sink), sdktrace.WithIDGenerator(IDGenerator()))
	tracer := tp.Tracer("b")
	b.ReportAllocs()
	for b.Loop() {
		tr.Emit(context.Background(), tracer)
	}
	b.ReportMetric(float64(len(tr.Spans)), "spans/tree")
}

type discard struct{}

func (*discard) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (*discard) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (*discard) Shutdown(context.Context) error                  { return nil }
func (*discard) ForceFlush(context.Context) error                { return nil }

// randomTimeline is a timeline with up to three runs (chunk events,
// preemptions) and a detokenization span, its instants in order.
func randomTimeline(rng *rand.Rand) Timeline {
	at := 0.0
	next := func() int64 { at += float64(1 + rng.IntN(50)); return ms(at) }
	tl := Timeline{Name: "chat m", Start: next(), InputProcessed: next(), FirstQueued: next(), InputTokens: rng.IntN(600)}
	for r := range 1 + rng.IntN(3) {
		run := Run{Start: next(), Chunks: 1 + rng.IntN(3), ComputedTokens: 100 * (r + 1), CachedTokens: rng.IntN(50)}
		for range run.Chunks - 1 {
			run.ChunkEvents = append(run.ChunkEvents, ChunkEvent{Time: next(), ComputedTokens: rng.IntN(600)})
		}
		run.FirstToken = next()
		run.OutputTokens = 1 + rng.IntN(100)
		for k := range rng.IntN(3) {
			run.Steps = append(run.Steps, StepEvent{Time: next(), Index: int64(k), BatchSize: 1 + k})
		}
		run.Preempted = next()
		tl.Runs = append(tl.Runs, run)
	}
	tl.Runs[len(tl.Runs)-1].Preempted = 0
	if rng.IntN(2) == 0 {
		tl.Detokenize = &Detokenize{First: next(), Last: next()}
	}
	tl.EngineEnd = next()
	tl.End = next()
	return tl
}

func linkContexts(ls []sdktrace.Link) []trace.SpanContext {
	var out []trace.SpanContext
	for _, l := range ls {
		out = append(out, l.SpanContext)
	}
	return out
}

// TestFinishedImplementsEveryMethod calls every method of
// sdktrace.ReadOnlySpan on an exported span. The type satisfies the sealed
// interface by embedding it (nil), so a method the SDK adds in a minor
// release would be promoted from the nil field and panic when called: this
// test fails that day, before any user's program does.
func TestFinishedImplementsEveryMethod(t *testing.T) {
	var tr Tree
	tl := randomTimeline(rand.New(rand.NewPCG(3, 4)))
	Build(&tl, &tr)
	var got []sdktrace.ReadOnlySpan
	tr.Export(collect(func(s sdktrace.ReadOnlySpan) { got = append(got, s) }), &Source{Resource: resource.Empty()})
	iface := reflect.TypeFor[sdktrace.ReadOnlySpan]()
	for _, s := range got[:1] {
		v := reflect.ValueOf(s)
		for i := range iface.NumMethod() {
			m := iface.Method(i)
			if !m.IsExported() {
				continue // the seal; the SDK never calls it
			}
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Errorf("%s: %v — the SDK added a method; implement it on finished", m.Name, r)
					}
				}()
				v.MethodByName(m.Name).Call(nil)
			}()
		}
	}
}

// collect is a span processor that hands every ended span to f.
type collect func(sdktrace.ReadOnlySpan)

func (f collect) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (f collect) OnEnd(s sdktrace.ReadOnlySpan)                   { f(s) }
func (f collect) Shutdown(context.Context) error                  { return nil }
func (f collect) ForceFlush(context.Context) error                { return nil }

// TestExportChildrenMatchesTracer: siblings handed over by ExportChildren
// are what starting each as a child of the parent through an SDK Tracer
// ends — parent, trace, state, the ids asked for, no children, no links —
// and without a valid parent or processor nothing is handed over.
func TestExportChildrenMatchesTracer(t *testing.T) {
	res := resource.NewSchemaless(attribute.String("service.name", "export-test"))
	scope := instrumentation.Scope{Name: "github.com/llmtrace/llmtrace/openaihttp", Version: "v9"}
	ts, _ := trace.ParseTraceState("vendor=x")
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: NewTraceID(), SpanID: NewSpanID(), TraceFlags: trace.FlagsSampled, TraceState: ts})
	preset := NewSpanID()
	ss := []Span{
		{Name: "POST", Kind: trace.SpanKindClient, Start: ms(1), End: ms(5), Attrs: []attribute.KeyValue{attribute.Int("http.response.status_code", 502)},
			Status: codes.Error, StatusDesc: "upstream"},
		{Name: "llm.proxy.stream", Kind: trace.SpanKindInternal, Start: ms(2), End: ms(5),
			Events: []Event{{Name: "llm.proxy.stall", Time: ms(3), Attrs: []attribute.KeyValue{attribute.Float64("gap", 0.5)}}}},
		{Name: "llm.proxy.wait_first_token", Kind: trace.SpanKindInternal, Start: ms(1), End: ms(2), Status: codes.Ok, StatusDesc: "dropped"},
	}
	ids := []trace.SpanID{preset} // the rest drawn

	viaTracer := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(viaTracer), sdktrace.WithResource(res))
	tracer := tp.Tracer(scope.Name, trace.WithInstrumentationVersion(scope.Version))
	ctx := trace.ContextWithSpanContext(context.Background(), parent)
	for _, s := range ss {
		_, span := tracer.Start(ctx, s.Name, trace.WithSpanKind(s.Kind), trace.WithTimestamp(time.Unix(0, s.Start)), trace.WithAttributes(s.Attrs...))
		for _, e := range s.Events {
			span.AddEvent(e.Name, trace.WithTimestamp(time.Unix(0, e.Time)), trace.WithAttributes(e.Attrs...))
		}
		span.SetStatus(s.Status, s.StatusDesc)
		span.End(trace.WithTimestamp(time.Unix(0, s.End)))
	}
	direct := tracetest.NewSpanRecorder()
	ExportChildren(direct, &Source{Resource: res, Scope: scope}, parent, ss, ids)
	got, want := direct.Ended(), viaTracer.Ended()
	if len(got) != len(want) {
		t.Fatalf("%d spans, want %d", len(got), len(want))
	}
	seen := map[trace.SpanID]bool{parent.SpanID(): true}
	for i := range got {
		compareSpan(t, i, got[i], want[i])
		id := got[i].SpanContext().SpanID()
		if seen[id] {
			t.Errorf("%s: span id %v repeated", got[i].Name(), id)
		}
		seen[id] = true
	}
	if id := got[0].SpanContext().SpanID(); id != preset {
		t.Errorf("first span's id %v, asked for %v", id, preset)
	}
	if len(direct.Started()) != 0 {
		t.Error("ExportChildren called OnStart")
	}

	for _, tc := range []struct {
		name   string
		sp     sdktrace.SpanProcessor
		parent trace.SpanContext
		ss     []Span
	}{
		{"no parent", direct, trace.SpanContext{}, ss},
		{"no processor", nil, parent, ss},
		{"no spans", direct, parent, nil},
	} {
		before := len(direct.Ended())
		ExportChildren(tc.sp, &Source{Resource: res}, tc.parent, tc.ss, nil)
		if n := len(direct.Ended()) - before; n != 0 {
			t.Errorf("%s: %d spans handed over", tc.name, n)
		}
	}
}
