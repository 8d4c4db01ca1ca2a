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
//     OTEL_BSP_* by batch.Processor, which counts every span it
//     cannot deliver in llm.spans.dropped; OTEL_METRIC_EXPORT_INTERVAL by
//     the periodic reader; OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES by
//     the resource.
//   - OTEL_TRACES_EXPORTER=none or OTEL_METRICS_EXPORTER=none turn one off.
package otelconf

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

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

	"github.com/llmtrace/llmtrace/batch"
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
	Batch *batch.Processor
	// Aggregator is the tracker's histogram fast path, registered on every
	// reader Setup built: Config.Aggregator, or one Setup made because the
	// caller brought no readers of its own (which could not serve it).
	Aggregator *otelstats.Aggregator

	resource *resource.Resource
	procs    fanout             // every span processor of TracerProvider
	direct   bool               // the SDK's sampler is the default: trees may bypass it
	tracker  []otelstats.Option // from LLMTRACE_* and the GenAI content variable
}

// TrackerOptions are the options that connect a Tracker to these providers
// on their fast paths: the Aggregator for the latency histograms, and span
// trees handed straight to the TracerProvider's span processors
// (otelstats.WithSpanProcessor) unless OTEL_TRACES_SAMPLER asks for a
// sampler other than the default, which only the Tracer path consults.
func (p *Providers) TrackerOptions() []otelstats.Option {
	opts := []otelstats.Option{otelstats.WithTracerProvider(p.TracerProvider), otelstats.WithMeterProvider(p.MeterProvider)}
	opts = append(opts, p.tracker...)
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
	if p.tracker, err = trackerOptions(env); err != nil {
		return nil, err
	}
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
		p.Batch = batch.NewProcessor(exp, append(batchOptions(env), batch.WithMeterProvider(p.MeterProvider))...)
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

// Environment variables of llmtrace's own, beside the OpenTelemetry ones.
const (
	// EnvSampling is the end-of-request sampling policy, in
	// otelstats.ParseSamplingPolicy's syntax.
	EnvSampling = "LLMTRACE_SAMPLING"
	// EnvDetail is the default detail level, 0–3 (otelstats.ParseDetail).
	EnvDetail = "LLMTRACE_DETAIL"
	// EnvCaptureContent is the GenAI convention's opt-in variable: "true"
	// records prompts and completions (otelstats.WithContentCapture).
	EnvCaptureContent = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
)

// trackerOptions reads the tracker's configuration from the environment.
func trackerOptions(env func(string) string) ([]otelstats.Option, error) {
	var opts []otelstats.Option
	if v := strings.TrimSpace(env(EnvSampling)); v != "" {
		pol, err := otelstats.ParseSamplingPolicy(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", EnvSampling, err)
		}
		opts = append(opts, otelstats.WithSampling(pol))
	}
	if v := strings.TrimSpace(env(EnvDetail)); v != "" {
		d, err := otelstats.ParseDetail(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", EnvDetail, err)
		}
		opts = append(opts, otelstats.WithDetail(d))
	}
	if on, _ := strconv.ParseBool(strings.TrimSpace(env(EnvCaptureContent))); on {
		opts = append(opts, otelstats.WithContentCapture(&otelstats.ContentCapture{}))
	}
	return opts, nil
}

// batchOptions maps the standard OTEL_BSP_* variables onto the batch
// processor's options; unset or unusable values keep its defaults.
func batchOptions(env func(string) string) []batch.Option {
	var opts []batch.Option
	num := func(name string) (int, bool) {
		v, err := strconv.Atoi(strings.TrimSpace(env(name)))
		return v, err == nil && v > 0
	}
	if n, ok := num("OTEL_BSP_MAX_QUEUE_SIZE"); ok {
		opts = append(opts, batch.WithMaxQueueSize(n))
	}
	if n, ok := num("OTEL_BSP_MAX_EXPORT_BATCH_SIZE"); ok {
		opts = append(opts, batch.WithMaxExportBatchSize(n))
	}
	if n, ok := num("OTEL_BSP_SCHEDULE_DELAY"); ok {
		opts = append(opts, batch.WithBatchTimeout(time.Duration(n)*time.Millisecond))
	}
	if n, ok := num("OTEL_BSP_EXPORT_TIMEOUT"); ok {
		opts = append(opts, batch.WithExportTimeout(time.Duration(n)*time.Millisecond))
	}
	return opts
}
