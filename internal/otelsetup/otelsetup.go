// Package otelsetup builds the TracerProvider and MeterProvider of llmtrace's
// commands and examples from the standard OTEL_* environment variables, so
// every binary is configured the same way:
//
//   - OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT /
//     OTEL_EXPORTER_OTLP_METRICS_ENDPOINT) turns OTLP export on; without
//     one nothing is exported.
//   - OTEL_EXPORTER_OTLP_PROTOCOL (or the _TRACES_/_METRICS_ variants):
//     "grpc" (the default here, matching port 4317) or "http/protobuf".
//   - OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, _INSECURE and the rest are read by
//     the exporters themselves; OTEL_TRACES_SAMPLER(_ARG) by the SDK;
//     OTEL_BSP_* by otelstats.BatchProcessor, which counts every span it
//     cannot deliver in llm.spans.dropped; OTEL_METRIC_EXPORT_INTERVAL by
//     the periodic reader; OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES by
//     the resource.
//   - OTEL_TRACES_EXPORTER=none or OTEL_METRICS_EXPORTER=none turn one off.
package otelsetup

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	promexp "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"

	"github.com/llmtrace/llmtrace/otelstats"
	"github.com/llmtrace/llmtrace/spans"
)

// Config adds to what the environment says.
type Config struct {
	// ServiceName is used when OTEL_SERVICE_NAME is not set.
	ServiceName string
	// SpanProcessors are added to the TracerProvider (e.g. an in-memory
	// capture for a terminal waterfall).
	SpanProcessors []sdktrace.SpanProcessor
	// Readers are added to the MeterProvider.
	Readers []sdkmetric.Reader
	// Prometheus adds a Prometheus exporter; Providers.MetricsHandler serves
	// it.
	Prometheus bool
	// Getenv reads the environment; os.Getenv when nil.
	Getenv func(string) string
	// Aggregator, when set, is registered as a producer on the OTLP and
	// Prometheus readers, so a tracker built WithAggregator(Aggregator)
	// exports its latency histograms through them.
	Aggregator *otelstats.Aggregator
}

// Providers are the configured providers. Shutdown flushes and stops them.
type Providers struct {
	TracerProvider *sdktrace.TracerProvider
	MeterProvider  *sdkmetric.MeterProvider
	// MetricsHandler serves /metrics when Config.Prometheus was set.
	MetricsHandler http.Handler
	// TracesExported and MetricsExported say whether OTLP export is on.
	TracesExported, MetricsExported bool
	// Batch is the processor exporting spans over OTLP (nil when trace
	// export is off), for its Counts.
	Batch *otelstats.BatchProcessor
	// Aggregator is the tracker's histogram fast path, registered on every
	// reader Setup built: Config.Aggregator, or one Setup made because the
	// caller brought no readers of its own (which could not serve it).
	Aggregator *otelstats.Aggregator

	resource *resource.Resource
	procs    fanout // every span processor of TracerProvider
	direct   bool   // the SDK's sampler is the default: trees may bypass it
}

// TrackerOptions are the options that connect a Tracker to these providers
// on their fast paths: the Aggregator for the latency histograms, and span
// trees handed straight to the TracerProvider's span processors
// (otelstats.WithSpanProcessor) unless OTEL_TRACES_SAMPLER asks for a
// sampler other than the default, which only the Tracer path consults.
func (p *Providers) TrackerOptions() []otelstats.Option {
	opts := []otelstats.Option{otelstats.WithTracerProvider(p.TracerProvider), otelstats.WithMeterProvider(p.MeterProvider)}
	if p.Aggregator != nil {
		opts = append(opts, otelstats.WithAggregator(p.Aggregator))
	}
	if p.direct {
		opts = append(opts, otelstats.WithSpanProcessor(p.procs), otelstats.WithResource(p.resource))
	}
	return opts
}

// fanout hands ended spans to every processor of the TracerProvider, for
// trees that bypass it. The providers' Shutdown shuts the processors down.
type fanout []sdktrace.SpanProcessor

var _ sdktrace.SpanProcessor = fanout(nil)

func (f fanout) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

func (f fanout) OnEnd(s sdktrace.ReadOnlySpan) {
	for _, p := range f {
		p.OnEnd(s)
	}
}

func (f fanout) ForceFlush(ctx context.Context) error {
	var errs []error
	for _, p := range f {
		errs = append(errs, p.ForceFlush(ctx))
	}
	return errors.Join(errs...)
}

// Shutdown does nothing: the processors belong to the TracerProvider.
func (f fanout) Shutdown(context.Context) error { return nil }

// Shutdown flushes and shuts both providers down within ctx.
func (p *Providers) Shutdown(ctx context.Context) error {
	return errors.Join(p.TracerProvider.Shutdown(ctx), p.MeterProvider.Shutdown(ctx))
}

// Setup builds the providers from the environment and c.
func Setup(ctx context.Context, c Config) (*Providers, error) {
	env := c.Getenv
	if env == nil {
		env = os.Getenv
	}
	name := c.ServiceName
	if name == "" {
		name = "llmtrace"
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(name)),
		resource.WithFromEnv(),
		resource.WithTelemetrySDK(),
	)
	if err != nil {
		return nil, err
	}
	p := &Providers{resource: res, Aggregator: c.Aggregator}
	if p.Aggregator == nil && len(c.Readers) == 0 {
		p.Aggregator = otelstats.NewAggregator()
	}
	c.Aggregator = p.Aggregator

	mopts := []sdkmetric.Option{sdkmetric.WithResource(res)}
	if on(env, "METRICS") {
		var exp sdkmetric.Exporter
		if protocol(env, "METRICS") == "grpc" {
			exp, err = otlpmetricgrpc.New(ctx)
		} else {
			exp, err = otlpmetrichttp.New(ctx)
		}
		if err != nil {
			return nil, err
		}
		var ropts []sdkmetric.PeriodicReaderOption
		if c.Aggregator != nil {
			ropts = append(ropts, sdkmetric.WithProducer(c.Aggregator))
		}
		mopts = append(mopts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, ropts...)))
		p.MetricsExported = true
	}
	if c.Prometheus {
		reg := prometheus.NewRegistry()
		popts := []promexp.Option{promexp.WithRegisterer(reg)}
		if c.Aggregator != nil {
			popts = append(popts, promexp.WithProducer(c.Aggregator))
		}
		exp, err := promexp.New(popts...)
		if err != nil {
			return nil, err
		}
		mopts = append(mopts, sdkmetric.WithReader(exp))
		p.MetricsHandler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true})
	}
	for _, r := range c.Readers {
		mopts = append(mopts, sdkmetric.WithReader(r))
	}
	p.MeterProvider = sdkmetric.NewMeterProvider(mopts...)
	topts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res), sdktrace.WithIDGenerator(spans.IDGenerator())}
	if on(env, "TRACES") {
		var exp sdktrace.SpanExporter
		if protocol(env, "TRACES") == "grpc" {
			exp, err = otlptracegrpc.New(ctx)
		} else {
			exp, err = otlptracehttp.New(ctx)
		}
		if err != nil {
			return nil, err
		}
		p.Batch = otelstats.NewBatchProcessor(exp, otelstats.WithBatchMeterProvider(p.MeterProvider))
		topts = append(topts, sdktrace.WithSpanProcessor(p.Batch))
		p.procs = append(p.procs, p.Batch)
		p.TracesExported = true
	}
	for _, sp := range c.SpanProcessors {
		topts = append(topts, sdktrace.WithSpanProcessor(sp))
		p.procs = append(p.procs, sp)
	}
	switch strings.ToLower(strings.TrimSpace(env("OTEL_TRACES_SAMPLER"))) {
	case "", "always_on", "parentbased_always_on":
		p.direct = true
	}
	p.TracerProvider = sdktrace.NewTracerProvider(topts...)

	return p, nil
}

// on reports whether OTLP export of signal (TRACES or METRICS) is configured.
func on(env func(string) string, signal string) bool {
	if strings.EqualFold(env("OTEL_"+signal+"_EXPORTER"), "none") {
		return false
	}
	return env("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || env("OTEL_EXPORTER_OTLP_"+signal+"_ENDPOINT") != ""
}

func protocol(env func(string) string, signal string) string {
	p := env("OTEL_EXPORTER_OTLP_" + signal + "_PROTOCOL")
	if p == "" {
		p = env("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if strings.HasPrefix(p, "http") {
		return "http"
	}
	return "grpc"
}
