package otlpwire

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
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

// marshalOnly is a client that does what both SDK clients do before the
// network: proto.Marshal the request.
type marshalOnly struct{ n int }

func (*marshalOnly) Start(context.Context) error { return nil }
func (*marshalOnly) Stop(context.Context) error  { return nil }
func (c *marshalOnly) UploadTraces(_ context.Context, rs []*tracepb.ResourceSpans) error {
	b, err := proto.Marshal(&coltracepb.ExportTraceServiceRequest{ResourceSpans: rs})
	c.n += len(b)
	return err
}

// requestSpans is a batch of 512 spans shaped like a proxied request's
// (a root with a dozen attributes, children with two or three).
func requestSpans() []sdktrace.ReadOnlySpan {
	res := resource.NewSchemaless(attribute.String("service.name", "llmtrace-proxy"), attribute.String("host.name", "node-1"))
	scope := instrumentation.Scope{Name: "github.com/llmtrace/llmtrace/otelstats", Version: "0.1.0"}
	root := []attribute.KeyValue{
		attribute.String("gen_ai.operation.name", "chat"), attribute.String("gen_ai.provider.name", "openai"),
		attribute.String("gen_ai.request.model", "llama-3-8b"), attribute.String("gen_ai.response.model", "llama-3-8b"),
		attribute.String("gen_ai.response.id", "chatcmpl-0123456789abcdef"), attribute.Int("gen_ai.usage.input_tokens", 812),
		attribute.Int("gen_ai.usage.output_tokens", 16), attribute.Float64("gen_ai.latency.time_to_first_token", 0.0143),
		attribute.Float64("gen_ai.latency.e2e", 0.031), attribute.StringSlice("gen_ai.response.finish_reasons", []string{"stop"}),
		attribute.String("http.request.method", "POST"), attribute.Int("http.response.status_code", 200),
	}
	child := []attribute.KeyValue{attribute.Int("llm.tokens", 16), attribute.Float64("llm.duration", 0.012)}
	out := make([]sdktrace.ReadOnlySpan, 512)
	for i := range out {
		s := tracetest.SpanStub{Name: "llm.decode", Attributes: child, Resource: res, InstrumentationScope: scope,
			SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: 1}),
			Parent:      trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: pid}), StartTime: t0, EndTime: t0}
		if i%6 == 0 {
			s.Name, s.Attributes, s.SpanKind, s.Parent = "chat llama-3-8b", root, trace.SpanKindServer, trace.SpanContext{}
		}
		out[i] = s.Snapshot()
	}
	return out
}

// BenchmarkExport encodes a batch of 512 spans through this package's
// Exporter and through the SDK's otlptrace.Exporter, each up to the bytes
// a client would send (ns and allocations per span).
func BenchmarkExport(b *testing.B) {
	spans := requestSpans()
	ctx := context.Background()
	ours, _ := New(ctx, &marshalOnly{})
	sdk, _ := otlptrace.New(ctx, &marshalOnly{})
	for _, c := range []struct {
		name string
		exp  sdktrace.SpanExporter
	}{{"otlpwire", ours}, {"sdk", sdk}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := c.exp.ExportSpans(ctx, spans); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(spans)), "ns/span")
			b.ReportMetric(0, "ns/op")
		})
	}
}
