package spanlog

import (
	"bytes"
	"context"
	"math"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

func TestRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	p := New(&buf, false)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(p))
	tr := tp.Tracer("t")
	t0 := time.Unix(1_700_000_000, 5)
	ctx, root := tr.Start(context.Background(), "root", trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(t0))
	_, child := tr.Start(ctx, "child", trace.WithTimestamp(t0.Add(time.Millisecond)),
		trace.WithAttributes(attribute.String("k", "v"), attribute.Int("n", 3)))
	child.AddEvent("ev", trace.WithTimestamp(t0.Add(2*time.Millisecond)), trace.WithAttributes(attribute.Bool("b", true)))
	child.End(trace.WithTimestamp(t0.Add(3 * time.Millisecond)))
	root.SetStatus(codes.Error, "abort")
	root.End(trace.WithTimestamp(t0.Add(4 * time.Millisecond)))
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, err := Read(&buf)
	if err != nil || len(got) != 2 {
		t.Fatalf("%v %+v", err, got)
	}
	c, r := got[0], got[1]
	if c.Name != "child" || c.ParentSpanID != r.SpanID || c.TraceID != r.TraceID || c.Kind != "internal" {
		t.Errorf("child %+v", c)
	}
	if c.StartNs != t0.UnixNano()+1e6 || c.EndNs != t0.UnixNano()+3e6 || c.Attributes["k"] != "v" || c.Attributes["n"] != float64(3) {
		t.Errorf("child %+v", c)
	}
	if len(c.Events) != 1 || c.Events[0].Name != "ev" || c.Events[0].TimeNs != t0.UnixNano()+2e6 || c.Events[0].Attributes["b"] != true {
		t.Errorf("events %+v", c.Events)
	}
	if r.Kind != "server" || r.Status != "Error" || r.StatusDescription != "abort" || r.ParentSpanID != "" {
		t.Errorf("root %+v", r)
	}
}

// TestUnencodableValues: a float attribute JSON has no number for (NaN,
// ±Inf, a 0/0 ratio or a hostile sampling parameter) costs the span's line
// nothing: json.Marshal refuses the whole span for it, and the span was
// lost without a count. Such a value is written as the string OpenTelemetry
// gives it outside OTLP ("NaN", "Infinity", "-Infinity"), in slices and
// maps too; strings that are not UTF-8 come out valid.
func TestUnencodableValues(t *testing.T) {
	var buf bytes.Buffer
	p := New(&buf, false)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(p))
	_, s := tp.Tracer("t").Start(context.Background(), "r\xff", trace.WithAttributes(
		attribute.Float64("nan", math.NaN()), attribute.Float64("inf", math.Inf(1)), attribute.Float64("ok", 0.5),
		attribute.Float64Slice("fs", []float64{1, math.Inf(-1)}), attribute.String("bad\xc0", "v\xff"),
		attribute.KeyValue{Key: "m", Value: attribute.MapValue(attribute.Float64("x", math.NaN()))},
		attribute.KeyValue{Key: "sl", Value: attribute.SliceValue(attribute.Float64Value(math.Inf(1)))},
	))
	s.AddEvent("e", trace.WithAttributes(attribute.Float64("nan", math.NaN())))
	s.End()
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, err := Read(&buf)
	if err != nil || len(got) != 1 {
		t.Fatalf("read %d spans, %v; want the span, with %d dropped", len(got), err, p.Dropped())
	}
	a := got[0].Attributes
	if a["nan"] != "NaN" || a["inf"] != "Infinity" || a["ok"] != 0.5 || got[0].Name != "r\uFFFD" || a["bad\uFFFD"] != "v\uFFFD" {
		t.Errorf("attributes %v, name %q", a, got[0].Name)
	}
	if fs, _ := a["fs"].([]any); len(fs) != 2 || fs[0] != float64(1) || fs[1] != "-Infinity" {
		t.Errorf("fs = %#v", a["fs"])
	}
	if m, _ := a["m"].(map[string]any); m["x"] != "NaN" {
		t.Errorf("m = %#v", a["m"])
	}
	if sl, _ := a["sl"].([]any); len(sl) != 1 || sl[0] != "Infinity" {
		t.Errorf("sl = %#v", a["sl"])
	}
	if len(got[0].Events) != 1 || got[0].Events[0].Attributes["nan"] != "NaN" {
		t.Errorf("events %+v", got[0].Events)
	}
}
