package otelconf

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	promexp "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/llmtrace/llmtrace/batch"
	"github.com/llmtrace/llmtrace/otelstats"
)

// producerKey carries the producer of one Setup call to the fallback
// producer factory that init registers with autoexport: the readers
// autoexport builds (prometheus, console) are configured by a context, not
// by options, and a context keeps concurrent Setup calls apart.
type producerKey struct{}

func init() {
	// autoexport calls the fallback when OTEL_METRICS_PRODUCERS is unset
	// (checkProducers refuses it set), with the context Setup gave
	// NewMetricReader. Another caller of autoexport gets no producer,
	// as autoexport's own default would give it.
	autoexport.WithFallbackMetricProducer(func(ctx context.Context) (sdkmetric.Producer, error) {
		if p, ok := ctx.Value(producerKey{}).(sdkmetric.Producer); ok {
			return p, nil
		}
		return noProducer{}, nil
	})
}

type noProducer struct{}

func (noProducer) Produce(context.Context) ([]metricdata.ScopeMetrics, error) { return nil, nil }

// histogramProducer is the producer a reader gets for the Aggregator,
// given the aggregation that reader's exporter asks for histograms (nil:
// explicit buckets). The Aggregator keeps explicit buckets only, so it
// serves them to every reader; the SDK's own histogram instruments follow
// the reader's aggregation.
func histogramProducer(agg *otelstats.Aggregator, _ sdkmetric.Aggregation) sdkmetric.Producer {
	return agg
}

// metricReader is one reader built from the environment.
type metricReader struct {
	reader sdkmetric.Reader
	state  *exportState
	// histograms is the aggregation the OTLP exporter asks for histogram
	// instruments; nil for other readers.
	histograms sdkmetric.Aggregation
}

// newMetricReader builds the reader sel names: a periodic OTLP reader
// here (gRPC by default; its exporter wrapped so failures are classified,
// reported once per run and counted, never returned), any other name
// through autoexport (prometheus with OTEL_EXPORTER_PROMETHEUS_HOST/PORT,
// console, none, registered ones). The Aggregator, when set, is a producer
// on each. It returns a nil reader for none.
func newMetricReader(ctx context.Context, sel selection, agg *otelstats.Aggregator) (metricReader, error) {
	if sel.exporter == "" {
		return metricReader{}, nil
	}
	state := &exportState{sel: sel}
	if sel.exporter != "otlp" {
		if agg != nil {
			ctx = context.WithValue(ctx, producerKey{}, histogramProducer(agg, nil))
		}
		r, err := autoexport.NewMetricReader(ctx)
		if err != nil {
			return metricReader{}, exporterError("OTEL_METRICS_EXPORTER", sel.exporter, "otlp, prometheus, console or none", err)
		}
		if autoexport.IsNoneMetricReader(r) {
			return metricReader{}, r.Shutdown(ctx)
		}
		return metricReader{reader: r, state: state}, nil
	}
	var (
		exp sdkmetric.Exporter
		err error
	)
	if sel.protocol == "grpc" {
		var opts []otlpmetricgrpc.Option
		if sel.override != "" {
			opts = append(opts, otlpmetricgrpc.WithEndpointURL(sel.override))
		}
		if sel.timeoutSet {
			opts = append(opts, otlpmetricgrpc.WithTimeout(sel.timeout))
		}
		if sel.gzip {
			opts = append(opts, otlpmetricgrpc.WithCompressor("gzip"))
		}
		if sel.plaintext {
			opts = append(opts, otlpmetricgrpc.WithTLSCredentials(insecure.NewCredentials()))
		}
		exp, err = otlpmetricgrpc.New(ctx, opts...)
	} else {
		var opts []otlpmetrichttp.Option
		if sel.override != "" {
			opts = append(opts, otlpmetrichttp.WithEndpointURL(sel.override))
		}
		if sel.timeoutSet {
			opts = append(opts, otlpmetrichttp.WithTimeout(sel.timeout))
		}
		if sel.gzip {
			opts = append(opts, otlpmetrichttp.WithCompression(otlpmetrichttp.GzipCompression))
		}
		if sel.plaintext {
			opts = append(opts, otlpmetrichttp.WithTLSClientConfig(nil))
		}
		exp, err = otlpmetrichttp.New(ctx, opts...)
	}
	if err != nil {
		return metricReader{}, fmt.Errorf("otelconf: metrics exporter: %w", err)
	}
	checkHistogramAggregation()
	checkTemporality()
	// The exporter read OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION;
	// the SDK's histograms follow what it answers here.
	hist := exp.Aggregation(sdkmetric.InstrumentKindHistogram)
	var opts []sdkmetric.PeriodicReaderOption
	if agg != nil {
		opts = append(opts, sdkmetric.WithProducer(histogramProducer(agg, hist)))
	}
	state.counted = true
	r := sdkmetric.NewPeriodicReader(&metricExporter{Exporter: exp, state: state}, opts...)
	return metricReader{reader: r, state: state, histograms: hist}, nil
}

// metricExporter counts the exports of the exporter it wraps. A failure is
// reported through otel.Handle once per run of failures, with its likely
// cause, and not returned: the periodic reader would report it again at
// every interval and fail Shutdown with it, so one backend that takes no
// metrics (Jaeger) would fail a run whose traces all landed.
type metricExporter struct {
	sdkmetric.Exporter
	state *exportState
}

var _ sdkmetric.Exporter = (*metricExporter)(nil)

func (e *metricExporter) Export(ctx context.Context, rm *metricdata.ResourceMetrics) error {
	err := e.Exporter.Export(ctx, rm)
	if err != nil && errors.Is(err, context.Canceled) && ctx.Err() != nil {
		// The periodic reader cancelled its own export (Shutdown does,
		// then exports once more): not the backend's failure.
		return nil
	}
	if _, ok := batch.Rejected(err); ok {
		// OTLP's partial success: the backend took the export, rejecting
		// some points or only warning; not a failure, and reported once
		// per run of such answers.
		if e.state.partial() {
			otel.Handle(fmt.Errorf("otelconf: metrics export to %s: %w", e.state.sel.target(), err))
		}
		return nil
	}
	if xe, first := e.state.done(err); first {
		otel.Handle(xe)
	}
	return nil
}

// prometheusHandler builds the Prometheus reader of Config.Prometheus and
// the handler that serves it.
func prometheusHandler(agg *otelstats.Aggregator) (sdkmetric.Reader, http.Handler, error) {
	reg := prometheus.NewRegistry()
	opts := []promexp.Option{promexp.WithRegisterer(reg)}
	if agg != nil {
		opts = append(opts, promexp.WithProducer(histogramProducer(agg, nil)))
	}
	exp, err := promexp.New(opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("otelconf: prometheus exporter: %w", err)
	}
	return exp, promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true}), nil
}

// disabledHandler answers scrapes when OTEL_SDK_DISABLED=true: a target
// that says why it has no data, rather than an empty page.
var disabledHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	http.Error(w, "metrics are disabled: OTEL_SDK_DISABLED=true", http.StatusServiceUnavailable)
})
