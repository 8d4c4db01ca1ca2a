package otelconf

import (
	"context"
	"fmt"

	"github.com/llmtrace/llmtrace/batch"
	"github.com/llmtrace/llmtrace/internal/otlpwire"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc/credentials/insecure"
)

// newSpanExporter builds the exporter sel names: OTLP here (gRPC by
// default, which autoexport cannot be told), any other name through
// autoexport (console, none, and what a program registered with
// autoexport.RegisterSpanExporter). It returns nil for none.
//
// OTLP spans are encoded by internal/otlpwire and sent by the SDK's own
// client (so every OTEL_EXPORTER_OTLP_* variable applies as before); the
// SDK's exporter, which builds protobuf structs first, stays for
// OTEL_GO_X_OBSERVABILITY=true, whose span counts read those structs.
func newSpanExporter(ctx context.Context, sel selection) (sdktrace.SpanExporter, error) {
	if sel.exporter == "" {
		return nil, nil
	}
	if sel.exporter != "otlp" {
		exp, err := autoexport.NewSpanExporter(ctx)
		if err != nil {
			return nil, exporterError("OTEL_TRACES_EXPORTER", sel.exporter, "otlp, console or none", err)
		}
		if autoexport.IsNoneSpanExporter(exp) {
			return nil, nil
		}
		return exp, nil
	}
	var client otlptrace.Client
	if sel.protocol == "grpc" {
		var opts []otlptracegrpc.Option
		if sel.override != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(sel.override))
		}
		if sel.timeoutSet {
			opts = append(opts, otlptracegrpc.WithTimeout(sel.timeout))
		}
		if sel.gzip {
			opts = append(opts, otlptracegrpc.WithCompressor("gzip"))
		}
		if sel.plaintext {
			opts = append(opts, otlptracegrpc.WithTLSCredentials(insecure.NewCredentials()))
		}
		client = otlptracegrpc.NewClient(opts...)
	} else {
		var opts []otlptracehttp.Option
		if sel.override != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(sel.override))
		}
		if sel.timeoutSet {
			opts = append(opts, otlptracehttp.WithTimeout(sel.timeout))
		}
		if sel.gzip {
			opts = append(opts, otlptracehttp.WithCompression(otlptracehttp.GzipCompression))
		}
		if sel.plaintext {
			opts = append(opts, otlptracehttp.WithTLSClientConfig(nil))
		}
		client = otlptracehttp.NewClient(opts...)
	}
	var (
		exp sdktrace.SpanExporter
		err error
	)
	if sel.sdkObservability {
		exp, err = otlptrace.New(ctx, client)
	} else {
		exp, err = otlpwire.New(ctx, client)
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
	err := e.SpanExporter.ExportSpans(ctx, spans)
	if _, ok := batch.Rejected(err); ok {
		// OTLP's partial success: the export succeeded; the processor
		// counts the spans the backend rejected, and reports them.
		e.state.done(nil)
		return err
	}
	if xe, _ := e.state.done(err); xe != nil {
		return xe
	}
	return nil
}
