package spanlog

import (
	"bytes"
	"context"
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
