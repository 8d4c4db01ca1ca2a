package otlpwire

import (
	"bytes"
	"context"
	"errors"
	"math"
	"sort"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// capture is an otlptrace.Client that keeps what it would send: the
// request's bytes, as proto.Marshal (which both SDK clients use) makes them.
type capture struct {
	sent    [][]byte
	err     error
	started int
	stopped int
}

var _ otlptrace.Client = (*capture)(nil)

func (c *capture) Start(context.Context) error { c.started++; return nil }
func (c *capture) Stop(context.Context) error  { c.stopped++; return nil }
func (c *capture) UploadTraces(_ context.Context, rs []*tracepb.ResourceSpans) error {
	b, err := proto.Marshal(&coltracepb.ExportTraceServiceRequest{ResourceSpans: rs})
	if err != nil {
		return err
	}
	c.sent = append(c.sent, b)
	return c.err
}

// decoded is a request's ResourceSpans in a fixed order (the SDK's
// exporter orders resources by map iteration), each marshalled alone.
func decoded(t *testing.T, req []byte) []string {
	t.Helper()
	var m coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(req, &m); err != nil {
		t.Fatalf("request does not decode: %v", err)
	}
	var out []string
	for _, rs := range m.ResourceSpans {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(rs)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(b))
	}
	sort.Strings(out)
	return out
}

// sameAsSDK exports spans through the SDK's otlptrace.Exporter and through
// Exporter and fails unless the backend would receive the same messages.
func sameAsSDK(t *testing.T, spans []sdktrace.ReadOnlySpan) {
	t.Helper()
	sameAs(t, spans, spans)
}

// sameAs exports spans through Exporter and sdkSpans through the SDK's
// exporter and fails unless the backend would receive the same messages.
func sameAs(t *testing.T, spans, sdkSpans []sdktrace.ReadOnlySpan) {
	t.Helper()
	ctx := context.Background()
	var want, got capture
	sdk, err := otlptrace.New(ctx, &want)
	if err != nil {
		t.Fatal(err)
	}
	ours, err := New(ctx, &got)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second time through reused buffers
		if err := sdk.ExportSpans(ctx, sdkSpans); err != nil {
			t.Fatal(err)
		}
		if err := ours.ExportSpans(ctx, spans); err != nil {
			t.Fatal(err)
		}
	}
	if len(got.sent) != len(want.sent) {
		t.Fatalf("%d requests, the SDK's exporter sent %d", len(got.sent), len(want.sent))
	}
	for i := range got.sent {
		g, w := decoded(t, got.sent[i]), decoded(t, want.sent[i])
		if len(g) != len(w) {
			t.Fatalf("request %d: %d resources, want %d", i, len(g), len(w))
		}
		for j := range g {
			if g[j] != w[j] {
				var gm, wm tracepb.ResourceSpans
				_ = proto.Unmarshal([]byte(g[j]), &gm)
				_ = proto.Unmarshal([]byte(w[j]), &wm)
				t.Fatalf("request %d, resource %d:\n got %v\nwant %v", i, j, &gm, &wm)
			}
		}
		if len(g) == 1 && !bytes.Equal(got.sent[i], want.sent[i]) {
			t.Errorf("request %d: same message, other bytes", i)
		}
	}
}

var (
	tid = trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	sid = trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8}
	pid = trace.SpanID{8, 7, 6, 5, 4, 3, 2, 1}
	t0  = time.Unix(1_700_000_000, 123456789)
)

// every attribute type, zero values and the lengths that move a message.
var allKinds = []attribute.KeyValue{
	attribute.Bool("t", true), attribute.Bool("f", false),
	attribute.Int64("i", -42), attribute.Int64("zero", 0), attribute.Int64("max", math.MaxInt64),
	attribute.Float64("pi", math.Pi), attribute.Float64("fzero", 0), attribute.Float64("negzero", math.Copysign(0, -1)),
	attribute.Float64("inf", math.Inf(-1)), attribute.Float64("nan", math.NaN()),
	attribute.String("s", "é✓"), attribute.String("empty", ""), attribute.String("", "no key"),
	attribute.String("s127", strings.Repeat("x", 120)), attribute.String("s200", strings.Repeat("y", 200)),
	attribute.String("s20k", strings.Repeat("z", 20_000)), attribute.String("s3M", strings.Repeat("w", 3<<20)),
	attribute.BoolSlice("bs", []bool{true, false}), attribute.Int64Slice("is", []int64{0, -1, 1 << 40}),
	attribute.Float64Slice("fs", []float64{0, 1.5}), attribute.StringSlice("ss", []string{"", "a"}),
	attribute.StringSlice("ss0", nil), attribute.Int64Slice("is0", []int64{}),
	{Key: "bytes", Value: attribute.ByteSliceValue([]byte{0, 1, 2})}, {Key: "bytes0", Value: attribute.ByteSliceValue(nil)},
	{Key: "nil"},
	{Key: "map", Value: attribute.MapValue(attribute.Int("a", 1), attribute.String("b", ""), attribute.KeyValue{Key: "c"})},
	{Key: "slice", Value: attribute.SliceValue(attribute.IntValue(1), attribute.StringValue("x"), attribute.SliceValue(), attribute.MapValue())},
}

func TestSameAsSDK(t *testing.T) {
	res := resource.NewWithAttributes("https://opentelemetry.io/schemas/1.37.0", attribute.String("service.name", "svc"), attribute.Int("n", 1))
	res2 := resource.NewSchemaless(attribute.String("service.name", "other"))
	same := resource.NewWithAttributes("https://opentelemetry.io/schemas/1.37.0", attribute.String("service.name", "svc"), attribute.Int("n", 1))
	scope := instrumentation.Scope{Name: "a", Version: "1.0", SchemaURL: "https://x/s", Attributes: attribute.NewSet(attribute.Bool("x", true))}
	ts, _ := trace.ParseTraceState("k=v,a=b")
	full := tracetest.SpanStub{
		Name:        strings.Repeat("n", 300),
		SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts}),
		Parent:      trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: pid, Remote: true}),
		SpanKind:    trace.SpanKindServer, StartTime: t0, EndTime: t0.Add(time.Second),
		Attributes: allKinds,
		Events: []sdktrace.Event{{Name: "e", Time: t0.Add(time.Millisecond), Attributes: allKinds[:5], DroppedAttributeCount: 2},
			{Name: ""}, {Time: time.Unix(-5, 0)}},
		Links: []sdktrace.Link{{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: pid, TraceFlags: 1, TraceState: ts, Remote: true}),
			Attributes: allKinds[10:14], DroppedAttributeCount: 1}, {}},
		Status:            sdktrace.Status{Code: codes.Error, Description: "boom"},
		DroppedAttributes: 3, DroppedEvents: 4, DroppedLinks: math.MaxInt32,
		ChildSpanCount: 2, Resource: res, InstrumentationScope: scope,
	}
	spanOf := func(s tracetest.SpanStub) sdktrace.ReadOnlySpan { return s.Snapshot() }
	kinds := func() []sdktrace.ReadOnlySpan {
		var out []sdktrace.ReadOnlySpan
		for k := range 8 {
			out = append(out, spanOf(tracetest.SpanStub{Name: "k", SpanKind: trace.SpanKind(k), Resource: res,
				Status: sdktrace.Status{Code: codes.Code(k % 3)}, StartTime: time.Unix(-1, 0)}))
		}
		return out
	}
	many := func(n int) []sdktrace.ReadOnlySpan {
		out := make([]sdktrace.ReadOnlySpan, n)
		for i := range out {
			s := full
			s.Attributes = allKinds[:12]
			s.Name = "span"
			s.Resource = []*resource.Resource{res, res2, same, nil}[i%4]
			s.InstrumentationScope = []instrumentation.Scope{scope, {}, {Name: "b"}}[i%3]
			out[i] = spanOf(s)
		}
		return out
	}
	for _, c := range []struct {
		name  string
		spans []sdktrace.ReadOnlySpan
	}{
		{"none", nil},
		{"nil spans", []sdktrace.ReadOnlySpan{nil, nil}},
		{"zero span", []sdktrace.ReadOnlySpan{spanOf(tracetest.SpanStub{})}},
		{"full", []sdktrace.ReadOnlySpan{spanOf(full)}},
		{"kinds and codes", kinds()},
		{"resources and scopes", many(24)},
		{"a big batch", many(2048)},
	} {
		t.Run(c.name, func(t *testing.T) { sameAsSDK(t, c.spans) })
	}
}

// A failed upload is the client's error, wrapped as the SDK's exporter
// wraps it; Shutdown stops the client once.
func TestErrorsAndShutdown(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("boom")
	c := &capture{err: boom}
	e, err := New(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	err = e.ExportSpans(ctx, []sdktrace.ReadOnlySpan{tracetest.SpanStub{Name: "x"}.Snapshot()})
	if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "traces export: ") {
		t.Errorf("export error %v", err)
	}
	for range 2 {
		if err := e.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if c.started != 1 || c.stopped != 1 {
		t.Errorf("started %d, stopped %d times", c.started, c.stopped)
	}
}

// FuzzSameAsSDK: attributes built from arbitrary input encode as the SDK's
// exporter encodes them.
func FuzzSameAsSDK(f *testing.F) {
	f.Add([]byte("s\x05hello"), "name")
	f.Add([]byte("i\xff\x01f\x00m"), "")
	f.Add([]byte(strings.Repeat("sa", 100)), strings.Repeat("n", 200))
	f.Fuzz(func(t *testing.T, in []byte, name string) {
		span := func(name string, attrs []attribute.KeyValue) sdktrace.ReadOnlySpan {
			return tracetest.SpanStub{Name: name, Attributes: attrs, Events: []sdktrace.Event{{Name: name, Attributes: attrs}},
				Resource: resource.NewSchemaless(attrs...)}.Snapshot()
		}
		attrs := attrsOf(in)
		sameAs(t, []sdktrace.ReadOnlySpan{span(name, attrs)}, []sdktrace.ReadOnlySpan{span(valid(name), validAttrs(attrs))})
	})
}

// attrsOf reads attributes from in: a type letter and what it needs.
func attrsOf(in []byte) []attribute.KeyValue {
	var out []attribute.KeyValue
	next := func() byte {
		if len(in) == 0 {
			return 0
		}
		b := in[0]
		in = in[1:]
		return b
	}
	for len(in) > 0 && len(out) < 64 {
		k := attribute.Key(string(rune('a' + len(out)%26)))
		switch next() % 7 {
		case 0:
			n := int(next())
			n = min(n, len(in))
			out = append(out, k.String(string(in[:n])))
			in = in[n:]
		case 1:
			out = append(out, k.Int64(int64(next())<<56>>int(next()%64)))
		case 2:
			out = append(out, k.Float64(math.Float64frombits(uint64(next())<<56|uint64(next()))))
		case 3:
			out = append(out, k.Bool(next()%2 == 1))
		case 4:
			out = append(out, k.StringSlice([]string{string(in[:min(len(in), 3)]), ""}))
		case 5:
			out = append(out, attribute.KeyValue{Key: k, Value: attribute.MapValue(k.Int(int(next())))})
		default:
			out = append(out, attribute.KeyValue{Key: k})
		}
	}
	return out
}

func valid(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// validAttrs is attrs with their strings made valid UTF-8, as Exporter
// writes them.
func validAttrs(attrs []attribute.KeyValue) []attribute.KeyValue {
	out := make([]attribute.KeyValue, len(attrs))
	for i, kv := range attrs {
		out[i] = attribute.KeyValue{Key: attribute.Key(valid(string(kv.Key))), Value: kv.Value}
		switch kv.Value.Type() {
		case attribute.STRING:
			out[i].Value = attribute.StringValue(valid(kv.Value.AsString()))
		case attribute.STRINGSLICE:
			ss := kv.Value.AsStringSlice()
			for j := range ss {
				ss[j] = valid(ss[j])
			}
			out[i].Value = attribute.StringSliceValue(ss)
		case attribute.MAP:
			out[i].Value = attribute.MapValue(validAttrs(kv.Value.AsMap())...)
		}
	}
	return out
}

// A string that is not UTF-8 costs its bad bytes, never the batch: the
// SDK's exporter fails the whole request for one such attribute.
func TestInvalidUTF8(t *testing.T) {
	bad := tracetest.SpanStub{Name: "a\xffb", Attributes: []attribute.KeyValue{attribute.String("user_agent.original", "ua\xc0"),
		attribute.StringSlice("s", []string{"\xfe"})}}.Snapshot()
	good := tracetest.SpanStub{Name: "ok"}.Snapshot()
	ctx := context.Background()
	var sdkc capture
	sdk, _ := otlptrace.New(ctx, &sdkc)
	if err := sdk.ExportSpans(ctx, []sdktrace.ReadOnlySpan{good, bad}); err == nil {
		t.Fatal("the SDK's exporter took invalid UTF-8; this package's reason to repair it is gone")
	}
	fixed := tracetest.SpanStub{Name: "a\uFFFDb", Attributes: []attribute.KeyValue{attribute.String("user_agent.original", "ua\uFFFD"),
		attribute.StringSlice("s", []string{"\uFFFD"})}}.Snapshot()
	sameAs(t, []sdktrace.ReadOnlySpan{good, bad}, []sdktrace.ReadOnlySpan{good, fixed})
}

// TestSameAsSDKHostile: what a hostile or odd request can put in a span —
// invalid UTF-8 in every string field, extreme numbers, zero and negative
// times, zero-length spans, all the trace flags — encodes as the SDK's
// exporter encodes the same span with its strings repaired.
func TestSameAsSDKHostile(t *testing.T) {
	const bad = "a\xffb\xc0\xe2\x82" // invalid bytes, a truncated sequence at the end
	fix := valid
	ts, _ := trace.ParseTraceState("k=v")
	hostile := func(s string) tracetest.SpanStub {
		attrs := []attribute.KeyValue{
			attribute.String(s, s), attribute.StringSlice(s+"ss", []string{s, "", s}),
			attribute.Int64("min", math.MinInt64), attribute.Int64Slice("neg", []int64{-1, math.MinInt64, math.MaxInt64}),
			attribute.Float64Slice("odd", []float64{math.NaN(), math.Inf(1), math.Copysign(0, -1), math.SmallestNonzeroFloat64}),
			attribute.BoolSlice("b0", []bool{}), attribute.Float64Slice("f0", nil),
			{Key: attribute.Key(s + "m"), Value: attribute.MapValue(attribute.String(s, s), attribute.KeyValue{Key: attribute.Key(s)})},
			{Key: "sl", Value: attribute.SliceValue(attribute.StringValue(s), attribute.StringSliceValue([]string{s}),
				attribute.MapValue(attribute.String(s, s)))},
			{Key: "bytes", Value: attribute.ByteSliceValue([]byte(bad))}, // bytes, not a string: kept as they are
		}
		res := resource.NewWithAttributes("https://x/"+s, append(attrs[:2:2], attribute.String("service.name", s))...)
		return tracetest.SpanStub{
			Name: s,
			SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid,
				TraceFlags: trace.FlagsSampled | trace.FlagsRandom | 0x80, TraceState: ts}),
			Parent:    trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: pid, TraceFlags: trace.FlagsSampled, Remote: true}),
			SpanKind:  trace.SpanKindClient,
			StartTime: time.Unix(0, 0), EndTime: time.Unix(0, 0),
			Attributes: attrs,
			Events: []sdktrace.Event{{Name: s, Time: time.Time{}, Attributes: attrs, DroppedAttributeCount: -1},
				{Name: s, Time: time.Unix(0, math.MaxInt64)}},
			Links: []sdktrace.Link{{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: pid,
				TraceFlags: 0xff, TraceState: ts}), Attributes: attrs, DroppedAttributeCount: math.MaxInt}},
			Status:            sdktrace.Status{Code: codes.Error, Description: s},
			DroppedAttributes: -5, DroppedEvents: math.MaxInt, DroppedLinks: 0,
			Resource: res,
			InstrumentationScope: instrumentation.Scope{Name: s, Version: s, SchemaURL: "https://y/" + s,
				Attributes: attribute.NewSet(attrs[:2]...)},
		}
	}
	ours, sdk := hostile(bad), hostile(fix(bad))
	for _, c := range []struct {
		name      string
		ours, sdk tracetest.SpanStub
	}{
		{"invalid UTF-8 everywhere", ours, sdk},
		{"zero times and zero-length", tracetest.SpanStub{Name: "z", StartTime: time.Time{}, EndTime: time.Time{},
			Events: []sdktrace.Event{{}}}, tracetest.SpanStub{Name: "z", Events: []sdktrace.Event{{}}}},
		{"only a scope schema", tracetest.SpanStub{InstrumentationScope: instrumentation.Scope{SchemaURL: "s"}, Resource: resource.Empty()},
			tracetest.SpanStub{InstrumentationScope: instrumentation.Scope{SchemaURL: "s"}, Resource: resource.Empty()}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sameAs(t, []sdktrace.ReadOnlySpan{c.ours.Snapshot()}, []sdktrace.ReadOnlySpan{c.sdk.Snapshot()})
		})
	}
	// Many spans of one resource and scope, one over 2 MiB, so the
	// ResourceSpans and ScopeSpans lengths take four-byte varints.
	big := make([]sdktrace.ReadOnlySpan, 0, 100)
	bigSDK := make([]sdktrace.ReadOnlySpan, 0, 100)
	for i := range 100 {
		o, s := ours, sdk
		if i == 7 {
			o.Attributes = append(o.Attributes[:len(o.Attributes):len(o.Attributes)], attribute.String("huge", strings.Repeat(bad, 1<<19)))
			s.Attributes = append(s.Attributes[:len(s.Attributes):len(s.Attributes)], attribute.String("huge", strings.Repeat(fix(bad), 1<<19)))
		}
		big, bigSDK = append(big, o.Snapshot()), append(bigSDK, s.Snapshot())
	}
	t.Run("a batch over 2 MiB", func(t *testing.T) { sameAs(t, big, bigSDK) })
}
