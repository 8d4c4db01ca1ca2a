package otelconf

import (
	"context"
	"errors"
	"os"
	"strings"

	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/llmtrace/llmtrace/otelstats"
)

// TrackerOptions are the options that connect a Tracker to these providers
// on their fast paths: the Aggregator for the latency histograms, and span
// trees handed straight to the TracerProvider's span processors
// (otelstats.WithSpanProcessor) unless OTEL_TRACES_SAMPLER asks for a
// sampler other than the default, which only the Tracer path consults.
// When no exporter or processor takes spans (OTEL_TRACES_EXPORTER=none,
// OTEL_SDK_DISABLED=true) they have the tracker build none
// (otelstats.WithTraces(false)). They also carry what LLMTRACE_SAMPLING,
// LLMTRACE_DETAIL and the GenAI content variable say.
func (p *Providers) TrackerOptions() []otelstats.Option {
	opts := []otelstats.Option{otelstats.WithTracerProvider(p.TracerProvider), otelstats.WithMeterProvider(p.MeterProvider)}
	opts = append(opts, p.tracker...)
	if p.Aggregator != nil {
		opts = append(opts, otelstats.WithAggregator(p.Aggregator))
	}
	switch {
	case len(p.procs) == 0:
		// Nothing takes the spans: build none (OTEL_TRACES_EXPORTER=none,
		// OTEL_SDK_DISABLED=true).
		opts = append(opts, otelstats.WithTraces(false))
	case p.direct:
		opts = append(opts, otelstats.WithSpanProcessor(p.procs), otelstats.WithResource(p.resource))
	}
	return opts
}

// SpanExport is where spans that bypass the Tracer go — every span
// processor of TracerProvider, and its resource — for a layer that builds
// finished spans as the tracker does (openaihttp.WithSpanProcessor and
// WithResource). ok is false when OTEL_TRACES_SAMPLER asks for a sampler
// other than the default, which only the Tracer consults: such spans
// should then go through the Tracer, as TrackerOptions has the tracker's.
func (p *Providers) SpanExport() (sp sdktrace.SpanProcessor, res *resource.Resource, ok bool) {
	if !p.direct {
		return nil, nil, false
	}
	return p.procs, p.resource, true
}

// defaultSampler reports whether OTEL_TRACES_SAMPLER leaves the SDK's
// default sampler (parent-based, always on), which every tree passes: then
// trees may skip the Tracer. The SDK itself reads the variable.
func defaultSampler() bool {
	switch strings.ToLower(strings.TrimSpace(os.Getenv("OTEL_TRACES_SAMPLER"))) {
	case "", "always_on", "parentbased_always_on":
		return true
	}
	return false
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
