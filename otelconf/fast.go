package otelconf

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/llmtrace/llmtrace/otelstats"
)

// TrackerOptions are the options that connect a Tracker to these providers
// on their fast paths: the Aggregator for the latency histograms, and span
// trees handed straight to the TracerProvider's span processors
// (otelstats.WithSpanProcessor). OTEL_TRACES_SAMPLER's sampler goes with
// them as the tracker's head sampler (otelstats.WithHeadSampler), asked at
// each request's arrival as the TracerProvider would ask it at the root's
// start, so the traceparent sent downstream carries its decision.
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
	if len(p.procs) == 0 {
		// Nothing takes the spans: build none (OTEL_TRACES_EXPORTER=none,
		// OTEL_SDK_DISABLED=true).
		return append(opts, otelstats.WithTraces(false))
	}
	return append(opts, otelstats.WithSpanProcessor(p.procs), otelstats.WithResource(p.resource))
}

// SpanExport is where spans that bypass the Tracer go — every span
// processor of TracerProvider, and its resource — for a layer that builds
// finished spans as the tracker does (openaihttp.WithSpanProcessor and
// WithResource); such a layer adds its spans only to traces the tracker
// kept, so the head sampler has decided for them too. ok is false for
// Providers Setup did not build.
func (p *Providers) SpanExport() (sp sdktrace.SpanProcessor, res *resource.Resource, ok bool) {
	if p.resource == nil {
		return nil, nil, false
	}
	return p.procs, p.resource, true
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
