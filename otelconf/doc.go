// Package otelconf builds the TracerProvider and MeterProvider of
// llmtrace's commands and examples — and of any program that embeds the
// tracker — from the standard OTEL_* environment variables, as the
// OpenTelemetry specification defines them, and maps llmtrace's own
// LLMTRACE_* variables onto tracker options. It is the one place in
// llmtrace that reads the environment.
//
//	prov, err := otelconf.Setup(ctx, otelconf.Config{ServiceName: "my-engine"})
//	if err != nil { ... }
//	defer prov.Shutdown(context.Background())
//	tracker, err := otelstats.NewTracker(prov.TrackerOptions()...)
//	...
//	fmt.Fprintln(os.Stderr, prov.Status()) // at exit: how many spans reached the backend
//
// Exporters come from go.opentelemetry.io/contrib/exporters/autoexport:
// OTEL_TRACES_EXPORTER and OTEL_METRICS_EXPORTER take otlp, console, none
// (and prometheus for metrics, served on OTEL_EXPORTER_PROMETHEUS_HOST and
// _PORT), or a name a program registered with autoexport. Three choices
// depart from autoexport's defaults, each for a reason:
//
//   - The OTLP protocol defaults to grpc (DefaultProtocol), the
//     specification's being http/protobuf: llmtrace's design and its
//     documented commands use port 4317. OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf
//     (or the per-signal variable) switches. otelconf builds the OTLP
//     exporters itself for that reason; the exporters still read every
//     other OTEL_EXPORTER_OTLP_* variable (endpoints, headers, TLS,
//     timeouts, compression, temporality, histogram aggregation). Spans
//     are encoded straight to OTLP's wire format (internal/otlpwire: the
//     same message as the SDK's exporter, without its protobuf structs)
//     and sent by the SDK's own client; a string that is not UTF-8 is
//     repaired instead of failing the batch.
//   - With neither an exporter variable nor an endpoint variable set,
//     nothing is exported (the specification's default, otlp to
//     localhost, would fail on most machines).
//   - Spans go through llmtrace's batch.Processor (options from OTEL_BSP_*),
//     not the SDK's BatchSpanProcessor, so produced = exported + dropped
//     holds exactly once Shutdown returned (Status).
//
// A failed export is never silent: its error (ExportError) names the likely
// cause — a gRPC exporter pointed at an OTLP/HTTP endpoint or the reverse,
// a backend that takes no metrics, nothing listening, TLS on one side — and
// is reported through otel.Handle once per run of failures. Failures never
// fail Shutdown: a backend that refuses one signal costs one warning, and
// Status says what reached it.
//
// OTEL_PROPAGATORS names the propagators Providers.Propagator returns for
// openaihttp (contrib's autoprop names; nil when unset, so that the
// caller's default, W3C Trace Context, stays); a name no propagator has
// fails Setup. Setup sets no global propagator.
//
// OTEL_SDK_DISABLED=true turns off everything the environment configures,
// and Config.Prometheus's handler answers 503; the program's own
// Config.SpanProcessors and Config.Readers stay.
//
// Importing the package registers, once, autoexport's fallback metric
// producer: the readers autoexport builds get the Aggregator from the
// context Setup passes them. OTEL_METRICS_PRODUCERS, which would replace
// it, is refused.
package otelconf
