package otelconf

import (
	"context"
	"errors"
	"os"
	"strings"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/llmtrace/llmtrace/otelstats"
)

// TrackerOptions are the options that connect a Tracker to these providers
// on their fast paths: the Aggregator for the latency histograms, and span
// trees handed straight to the TracerProvider's span processors
// (otelstats.WithSpanProcessor) unless OTEL_TRACES_SAMPLER asks for a
// sampler other than the default, which only the Tracer path consults.
// They also carry what LLMTRACE_SAMPLING, LLMTRACE_DETAIL and the GenAI
// content variable say.
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
