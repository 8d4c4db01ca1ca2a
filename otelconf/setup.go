package otelconf

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"

	"github.com/llmtrace/llmtrace/batch"
	"github.com/llmtrace/llmtrace/otelstats"
	"github.com/llmtrace/llmtrace/spans"
)

// Providers are the configured providers. Shutdown flushes and stops them;
// Status says what their exporters did. The zero Providers is not usable:
// Setup makes them. They are safe for concurrent use.
type Providers struct {
	TracerProvider *sdktrace.TracerProvider
	MeterProvider  *sdkmetric.MeterProvider
	// MetricsHandler serves /metrics when Config.Prometheus was set.
	MetricsHandler http.Handler
	// TracesExported and MetricsExported say whether spans and metrics
	// leave the process through an exporter the environment (or
	// Config.TracesEndpoint) configured.
	TracesExported, MetricsExported bool
	// Batch is the processor exporting spans (nil when trace export is
	// off), for its Counts; BatchConfig is how it was configured.
	Batch       *batch.Processor
	BatchConfig BatchConfig
	// Aggregator is the tracker's histogram fast path, registered on every
	// reader Setup built: Config.Aggregator, or one Setup made because the
	// caller brought no readers of its own (which could not serve it).
	Aggregator *otelstats.Aggregator
	// HistogramAggregation is what the OTLP metric exporter asks for
	// histogram instruments (OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION):
	// sdkmetric.AggregationBase2ExponentialHistogram or the default
	// (explicit buckets); nil without OTLP metric export. The SDK's
	// instruments follow it; the Aggregator's histograms keep explicit
	// buckets.
	HistogramAggregation sdkmetric.Aggregation

	resource *resource.Resource
	procs    fanout             // every span processor of TracerProvider
	tracker  []otelstats.Option // from LLMTRACE_* and the GenAI content variable
	// propagator is OTEL_PROPAGATORS's, nil when it is unset.
	propagator propagation.TextMapPropagator
	disabled   bool
	traces     *exportState
	metrics    *exportState

	shutdownOnce sync.Once
	shutdownErr  error
}

// Setup builds the providers from the environment and c: the exporters
// OTEL_TRACES_EXPORTER and OTEL_METRICS_EXPORTER name (OTLP when only an
// endpoint is set; nothing when neither is), each signal's own endpoint
// and protocol, the batch processor from OTEL_BSP_*, the resource from
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, and the tracker's
// options from LLMTRACE_SAMPLING, LLMTRACE_DETAIL and the GenAI content
// variable, and the propagators from OTEL_PROPAGATORS (Propagator). With
// OTEL_SDK_DISABLED=true nothing is exported. A value no
// exporter can use fails Setup with an error naming the variable.
func Setup(ctx context.Context, c Config) (*Providers, error) {
	name := c.ServiceName
	if name == "" {
		name = "llmtrace"
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(name)),
		resource.WithFromEnv(),
		resource.WithTelemetrySDK(),
	)
	if errors.Is(err, resource.ErrPartialResource) {
		// As the SDK's default resource does: report it, keep the pairs
		// that parsed and start. A trailing comma in a templated
		// OTEL_RESOURCE_ATTRIBUTES must not keep the server down.
		otel.Handle(fmt.Errorf("otelconf: OTEL_RESOURCE_ATTRIBUTES=%q: %w; the valid pairs apply", os.Getenv("OTEL_RESOURCE_ATTRIBUTES"), err))
		err = nil
	}
	if err != nil {
		return nil, err
	}
	res = validResource(res)
	p := &Providers{resource: res, Aggregator: c.Aggregator, disabled: sdkDisabled()}
	if p.tracker, err = trackerOptions(p.disabled); err != nil {
		return nil, err
	}
	if p.propagator, err = propagators(); err != nil {
		return nil, err
	}
	if p.Aggregator == nil && len(c.Readers) == 0 && !exponentialHistograms() && !deltaTemporality() && !exemplarsOff() {
		p.Aggregator = otelstats.NewAggregator()
	}
	var tsel, msel selection
	if !p.disabled {
		checkExemplarFilter()
		if tsel, err = selectSignal("traces", c.TracesEndpoint); err != nil {
			return nil, err
		}
		if !c.NoMetricsExport {
			if msel, err = selectSignal("metrics", ""); err != nil {
				return nil, err
			}
		}
	}
	if err := p.setupMetrics(ctx, c, msel); err != nil {
		return nil, err
	}
	if err := p.setupTraces(ctx, c, tsel); err != nil {
		return nil, errors.Join(err, p.MeterProvider.Shutdown(ctx))
	}
	return p, nil
}

func (p *Providers) setupMetrics(ctx context.Context, c Config, sel selection) error {
	opts := []sdkmetric.Option{sdkmetric.WithResource(p.resource)}
	var env sdkmetric.Reader // built from the environment: shut down if Prometheus fails
	if sel.exporter != "" {
		if err := checkProducers(sel.exporter); err != nil {
			return err
		}
		mr, err := newMetricReader(ctx, sel, p.Aggregator)
		if err != nil {
			return err
		}
		if env = mr.reader; env != nil {
			opts = append(opts, sdkmetric.WithReader(env))
			p.metrics, p.MetricsExported, p.HistogramAggregation = mr.state, true, mr.histograms
		}
	}
	switch {
	case c.Prometheus && p.disabled:
		p.MetricsHandler = disabledHandler
	case c.Prometheus:
		r, h, err := prometheusHandler(p.Aggregator)
		if err != nil {
			if env != nil {
				err = errors.Join(err, env.Shutdown(ctx))
			}
			return err
		}
		opts = append(opts, sdkmetric.WithReader(r))
		p.MetricsHandler = h
	}
	for _, r := range c.Readers {
		opts = append(opts, sdkmetric.WithReader(r))
	}
	p.MeterProvider = sdkmetric.NewMeterProvider(opts...)
	return nil
}

func (p *Providers) setupTraces(ctx context.Context, c Config, sel selection) error {
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(p.resource), sdktrace.WithIDGenerator(spans.IDGenerator())}
	exp, err := newSpanExporter(ctx, sel)
	if err != nil {
		return err
	}
	if exp != nil {
		p.traces = &exportState{sel: sel, counted: true}
		wrapped := &spanExporter{SpanExporter: exp, state: p.traces}
		p.BatchConfig = batchConfig()
		p.Batch = batch.NewProcessor(wrapped, append(p.BatchConfig.options(), batch.WithMeterProvider(p.MeterProvider))...)
		opts = append(opts, sdktrace.WithSpanProcessor(p.Batch))
		p.procs = append(p.procs, p.Batch)
		p.TracesExported = true
	}
	for _, sp := range c.SpanProcessors {
		opts = append(opts, sdktrace.WithSpanProcessor(sp))
		p.procs = append(p.procs, sp)
	}
	p.TracerProvider = sdktrace.NewTracerProvider(opts...)
	return nil
}

// Shutdown flushes and shuts both providers down within ctx. Export
// failures are not its errors (Status has them): only a flush or shutdown
// that did not finish. It is idempotent: a later call (a deferred one
// after the explicit one at exit) waits for the first and returns its
// result, where the MeterProvider's own second Shutdown is an error.
func (p *Providers) Shutdown(ctx context.Context) error {
	p.shutdownOnce.Do(func() {
		p.shutdownErr = errors.Join(p.TracerProvider.Shutdown(ctx), p.MeterProvider.Shutdown(ctx))
	})
	return p.shutdownErr
}

// Status is what the exporters did so far.
func (p *Providers) Status() Status {
	s := Status{Disabled: p.disabled, Traces: p.traces.status(), Metrics: p.metrics.status()}
	if p.Batch != nil {
		s.Traces.Produced, s.Traces.Exported, s.Traces.Dropped = p.Batch.Counts()
	}
	return s
}

// validResource is res with every string made valid UTF-8, U+FFFD in place
// of each run of invalid bytes, as internal/otlpwire writes span strings.
// OTEL_RESOURCE_ATTRIBUTES is percent-decoded (k=%FF is the byte 0xFF) and
// OTEL_SERVICE_NAME is taken as it comes, yet protobuf strings are UTF-8:
// kept as they were, they failed every metric export (and every span
// export through the SDK's exporter) for the life of the process. The
// repair is reported, naming the keys.
func validResource(res *resource.Resource) *resource.Resource {
	attrs := res.Attributes()
	var bad []string
	for i, kv := range attrs {
		k, v := string(kv.Key), kv.Value
		switch v.Type() {
		case attribute.STRING:
			if s := v.AsString(); !utf8.ValidString(s) {
				v = attribute.StringValue(strings.ToValidUTF8(s, "\uFFFD"))
			}
		case attribute.STRINGSLICE:
			ss := v.AsStringSlice()
			fixed := false
			for j, s := range ss {
				if !utf8.ValidString(s) {
					ss[j], fixed = strings.ToValidUTF8(s, "\uFFFD"), true
				}
			}
			if fixed {
				v = attribute.StringSliceValue(ss)
			}
		}
		if !utf8.ValidString(k) {
			k = strings.ToValidUTF8(k, "\uFFFD")
		}
		if k != string(kv.Key) || v != kv.Value {
			attrs[i] = attribute.KeyValue{Key: attribute.Key(k), Value: v}
			bad = append(bad, strconv.Quote(k))
		}
	}
	if len(bad) == 0 {
		return res
	}
	otel.Handle(fmt.Errorf("otelconf: resource attributes %s (OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME) are not valid UTF-8, which OTLP requires; invalid bytes are written as U+FFFD", strings.Join(bad, ", ")))
	return resource.NewWithAttributes(res.SchemaURL(), attrs...)
}
