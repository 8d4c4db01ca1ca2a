package testbackend

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// newProvider returns a tracer provider for service exporting through exp,
// shut down (flushed) by the returned func.
func newProvider(t *testing.T, service string, exp sdktrace.SpanExporter) *sdktrace.TracerProvider {
	t.Helper()
	res := resource.NewSchemaless(attribute.String("service.name", service))
	tp := sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp
}

func uniqueService(t *testing.T) string {
	return fmt.Sprintf("testbackend-%s-%d", t.Name(), time.Now().UnixNano())
}

// emitRequestTrace records a server root span with a client child, rich
// attributes, an event and an error status, and returns the trace ID.
func emitRequestTrace(t *testing.T, tp *sdktrace.TracerProvider, start time.Time) trace.TraceID {
	t.Helper()
	tr := tp.Tracer("llmtrace/testbackend-test", trace.WithInstrumentationVersion("0.0.1"))
	ctx, root := tr.Start(context.Background(), "chat tiny",
		trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(start),
		trace.WithAttributes(
			attribute.String("gen_ai.request.model", "tiny"),
			attribute.Int64("gen_ai.usage.input_tokens", 1234567890123),
			attribute.Float64("gen_ai.request.temperature", 0.25),
			attribute.Bool("llmtrace.streaming", true),
			attribute.StringSlice("gen_ai.response.finish_reasons", []string{"stop", "length"}),
			attribute.Int64Slice("llmtrace.test.ints", []int64{1, 2}),
		))
	_, child := tr.Start(ctx, "llmtrace.prefill",
		trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(start.Add(2*time.Millisecond)))
	child.AddEvent("llmtrace.first_token", trace.WithTimestamp(start.Add(5*time.Millisecond)),
		trace.WithAttributes(attribute.Int("llmtrace.tokens", 1)))
	child.SetStatus(codes.Error, "preempted twice")
	child.End(trace.WithTimestamp(start.Add(7 * time.Millisecond)))
	root.End(trace.WithTimestamp(start.Add(10 * time.Millisecond)))
	return root.SpanContext().TraceID()
}

// Spans sent with the real OTLP/gRPC exporter come back intact through the
// v3 query API: IDs, parentage, kinds, timestamps, typed attributes, events,
// status and the resource's service name.
func TestJaegerRoundTripOTLPGRPC(t *testing.T) {
	t.Parallel()
	j := StartJaeger(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(j.OTLPGRPCEndpoint()), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	service := uniqueService(t)
	tp := newProvider(t, service, exp)
	start := time.Now().Add(-time.Second).Truncate(time.Microsecond)
	id := emitRequestTrace(t, tp, start)

	got, err := j.WaitTrace(ctx, id.String(), 2)
	if err != nil {
		t.Fatal(err)
	}
	if got.TraceID != id.String() || len(got.Spans) != 2 {
		t.Fatalf("trace %s with %d spans, want %s with 2", got.TraceID, len(got.Spans), id)
	}
	root, ok := got.Root()
	if !ok {
		t.Fatalf("no root span in %+v", got.Spans)
	}
	if root.Name != "chat tiny" || root.Kind != SpanKindServer || root.ServiceName != service {
		t.Errorf("root = %q kind %d service %q", root.Name, root.Kind, root.ServiceName)
	}
	if root.StartUnixNano != uint64(start.UnixNano()) || root.Duration() != 10*time.Millisecond {
		t.Errorf("root start %d (want %d), duration %v", root.StartUnixNano, start.UnixNano(), root.Duration())
	}
	if root.ScopeName != "llmtrace/testbackend-test" || root.ScopeVersion != "0.0.1" {
		t.Errorf("scope = %q %q", root.ScopeName, root.ScopeVersion)
	}
	wantAttrs := map[string]any{
		"gen_ai.request.model":           "tiny",
		"gen_ai.usage.input_tokens":      int64(1234567890123),
		"gen_ai.request.temperature":     0.25,
		"llmtrace.streaming":             true,
		"gen_ai.response.finish_reasons": []any{"stop", "length"},
		"llmtrace.test.ints":             []any{int64(1), int64(2)},
	}
	for k, want := range wantAttrs {
		if g := root.Attributes[k]; fmt.Sprintf("%#v", g) != fmt.Sprintf("%#v", want) {
			t.Errorf("root attribute %s = %#v, want %#v", k, g, want)
		}
	}

	kids := got.Children(root.SpanID)
	if len(kids) != 1 {
		t.Fatalf("root has %d children, want 1", len(kids))
	}
	child := kids[0]
	if child.Name != "llmtrace.prefill" || child.Kind != SpanKindClient || child.ParentSpanID != root.SpanID {
		t.Errorf("child = %+v", child)
	}
	if child.Status != (Status{Code: StatusError, Message: "preempted twice"}) {
		t.Errorf("child status = %+v", child.Status)
	}
	if len(child.Events) != 1 || child.Events[0].Name != "llmtrace.first_token" ||
		child.Events[0].TimeUnixNano != uint64(start.Add(5*time.Millisecond).UnixNano()) ||
		child.Events[0].Attributes["llmtrace.tokens"] != int64(1) {
		t.Errorf("child events = %+v", child.Events)
	}
	if s, ok := got.Span("llmtrace.prefill"); !ok || s.SpanID != child.SpanID {
		t.Errorf("Span(name) = %+v, %v", s, ok)
	}

	services, err := j.Services(ctx)
	if err != nil || !slices.Contains(services, service) {
		t.Errorf("Services() = %v, %v; want it to hold %q", services, err, service)
	}

	// A second trace, and one with an old (replayed) start time: search
	// finds all three, newest first.
	id2 := emitRequestTrace(t, tp, start.Add(time.Millisecond*500))
	id3 := emitRequestTrace(t, tp, time.Date(2023, 11, 16, 12, 0, 0, 0, time.UTC))
	for _, id := range []trace.TraceID{id2, id3} {
		if _, err := j.WaitTrace(ctx, id.String(), 2); err != nil {
			t.Fatal(err)
		}
	}
	found, err := j.FindTraces(ctx, service, 10)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, tr := range found {
		ids = append(ids, tr.TraceID)
		if len(tr.Spans) != 2 {
			t.Errorf("found trace %s with %d spans, want 2", tr.TraceID, len(tr.Spans))
		}
	}
	if want := []string{id2.String(), id.String(), id3.String()}; !slices.Equal(ids, want) {
		t.Errorf("FindTraces = %v, want %v", ids, want)
	}
	if lim, err := j.FindTraces(ctx, service, 1); err != nil || len(lim) != 1 {
		t.Errorf("FindTraces(limit 1) = %d traces, %v", len(lim), err)
	}
	byOp, err := j.FindTracesQuery(ctx, TraceQuery{Service: service, Operation: "chat tiny", StartMin: start.Add(-time.Minute)})
	if err != nil || len(byOp) != 2 {
		t.Errorf("FindTracesQuery(operation, since a minute ago) = %d traces, %v; want 2", len(byOp), err)
	}
	none, err := j.FindTraces(ctx, "no-such-service", 10)
	if err != nil || len(none) != 0 {
		t.Errorf("FindTraces(unknown service) = %v, %v; want none", none, err)
	}
	if _, err := j.GetTrace(ctx, "0123456789abcdef0123456789abcdef"); !errors.Is(err, ErrTraceNotFound) {
		t.Errorf("GetTrace(unknown) err = %v, want ErrTraceNotFound", err)
	}
}

// The OTLP/HTTP receiver works too, and Jaeger can be stopped and restarted
// on the same ports: exports fail while it is down and succeed after.
func TestJaegerOTLPHTTPAndRestart(t *testing.T) {
	t.Parallel()
	j := StartJaeger(t)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()

	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(j.OTLPHTTPEndpoint()), otlptracehttp.WithInsecure(),
		otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}))
	if err != nil {
		t.Fatal(err)
	}
	service := uniqueService(t)
	tp := newProvider(t, service, exp)
	id := emitRequestTrace(t, tp, time.Now())
	if _, err := j.WaitTrace(ctx, id.String(), 2); err != nil {
		t.Fatal(err)
	}

	endpoints := []string{j.OTLPGRPCEndpoint(), j.OTLPHTTPEndpoint(), j.QueryURL()}
	j.Stop()
	if j.Running() {
		t.Fatal("Running() after Stop")
	}
	j.Stop() // idempotent

	// While Jaeger is down the exporter reports errors.
	down := &recordingExporter{SpanExporter: exp}
	tpDown := newProvider(t, service, down)
	_, sp := tpDown.Tracer("t").Start(ctx, "lost")
	sp.End()
	if down.errs == 0 {
		t.Error("export to a stopped Jaeger did not fail")
	}

	j.Restart()
	if got := []string{j.OTLPGRPCEndpoint(), j.OTLPHTTPEndpoint(), j.QueryURL()}; !slices.Equal(got, endpoints) {
		t.Fatalf("endpoints changed across restart: %v -> %v", endpoints, got)
	}
	if _, err := j.GetTrace(ctx, id.String()); !errors.Is(err, ErrTraceNotFound) {
		t.Errorf("in-memory trace survived a restart: err = %v", err)
	}
	id2 := emitRequestTrace(t, tp, time.Now())
	if _, err := j.WaitTrace(ctx, id2.String(), 2); err != nil {
		t.Fatal(err)
	}
}

// recordingExporter counts failed exports.
type recordingExporter struct {
	sdktrace.SpanExporter
	errs int
}

func (r *recordingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := r.SpanExporter.ExportSpans(ctx, spans)
	if err != nil {
		r.errs++
	}
	return err
}

func (r *recordingExporter) Shutdown(context.Context) error { return nil }

// Jaeger's own metrics endpoint is up and scrapeable by Prometheus, which
// sees the spans Jaeger accepted.
func TestJaegerMetricsScrapedByPrometheus(t *testing.T) {
	t.Parallel()
	j := StartJaeger(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(j.OTLPGRPCEndpoint()), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	tp := newProvider(t, uniqueService(t), exp)
	id := emitRequestTrace(t, tp, time.Now())
	if _, err := j.WaitTrace(ctx, id.String(), 2); err != nil {
		t.Fatal(err)
	}
	prom := StartPrometheus(t, []string{j.MetricsURL()}, 100*time.Millisecond)
	got, err := prom.WaitForSeries(ctx, `sum(otelcol_receiver_accepted_spans_total) >= 2`)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Jaeger accepted %v spans", got[0].Value)
}
