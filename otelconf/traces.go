package otelconf

import (
	"context"
	"fmt"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// newSpanExporter builds the exporter sel names: OTLP here (gRPC by
// default, which autoexport cannot be told), any other name through
// autoexport (console, none, and what a program registered with
// autoexport.RegisterSpanExporter). It returns nil for none.
func newSpanExporter(ctx context.Context, sel selection) (sdktrace.SpanExporter, error) {
	if sel.exporter == "" {
		return nil, nil
	}
	var (
		exp sdktrace.SpanExporter
		err error
	)
	switch {
	case sel.exporter != "otlp":
		exp, err = autoexport.NewSpanExporter(ctx)
		if err != nil {
			return nil, exporterError("OTEL_TRACES_EXPORTER", sel.exporter, "otlp, console or none", err)
		}
		if autoexport.IsNoneSpanExporter(exp) {
			return nil, nil
		}
	case sel.protocol == "grpc":
		var opts []otlptracegrpc.Option
		if sel.override != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(sel.override))
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	default:
		var opts []otlptracehttp.Option
		if sel.override != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(sel.override))
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("otelconf: traces exporter: %w", err)
	}
	return exp, nil
}

// spanExporter counts the exports of the exporter it wraps and returns
// their failures as *ExportError, naming the likely cause. The batch
// processor reports the first failure of each run through otel.Handle.
type spanExporter struct {
	sdktrace.SpanExporter
	state *exportState
}

var _ sdktrace.SpanExporter = (*spanExporter)(nil)

func (e *spanExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if xe, _ := e.state.done(e.SpanExporter.ExportSpans(ctx, spans)); xe != nil {
		return xe
	}
	return nil
}
