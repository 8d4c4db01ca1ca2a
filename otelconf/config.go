package otelconf

import (
	"strconv"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/llmtrace/llmtrace/otelstats"
)

// Config is what a program adds to what the environment says. The zero
// Config is valid: everything comes from the environment.
type Config struct {
	// ServiceName is used when neither OTEL_SERVICE_NAME nor a
	// service.name in OTEL_RESOURCE_ATTRIBUTES is set (default
	// "llmtrace").
	ServiceName string
	// SpanProcessors are added to the TracerProvider (e.g. an in-memory
	// capture for a terminal waterfall). They are the program's own, so
	// OTEL_SDK_DISABLED leaves them in place.
	SpanProcessors []sdktrace.SpanProcessor
	// Readers are added to the MeterProvider, also with OTEL_SDK_DISABLED.
	Readers []sdkmetric.Reader
	// Prometheus adds a Prometheus exporter; Providers.MetricsHandler
	// serves it (with OTEL_SDK_DISABLED it answers 503 and says why).
	Prometheus bool
	// Aggregator, when set, is registered as a producer on every reader
	// Setup builds (OTLP, Prometheus, console), so a tracker built
	// WithAggregator(Aggregator) exports its latency histograms through
	// them.
	Aggregator *otelstats.Aggregator
	// TracesEndpoint, when set, exports traces over OTLP to it — a URL,
	// or host:port for a plaintext connection — whatever
	// OTEL_TRACES_EXPORTER and the endpoint variables say; the protocol,
	// headers and timeouts still come from the environment. It is a
	// command's -endpoint flag.
	TracesEndpoint string
	// NoMetricsExport builds no metric exporter from the environment, for
	// a program that measures span export alone; Prometheus and Readers
	// still work.
	NoMetricsExport bool
}

// ConfigError is Setup's error for a value it cannot use: in an
// environment variable, or in a Config field. A command exits with its
// usage status for it.
type ConfigError struct {
	// Name is the variable (OTEL_EXPORTER_OTLP_PROTOCOL) or the field
	// (Config.TracesEndpoint).
	Name, Value string
	// Reason says what is wrong and what would do.
	Reason string
	// Err is the underlying error, if any.
	Err error
}

var _ error = (*ConfigError)(nil)

func (e *ConfigError) Error() string {
	s := "otelconf: " + e.Name + "=" + strconv.Quote(e.Value) + ": " + e.Reason
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *ConfigError) Unwrap() error { return e.Err }
