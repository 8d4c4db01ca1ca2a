package batch

import (
	"time"

	"go.opentelemetry.io/otel/metric"
)

// Defaults of a Processor.
const (
	// DefaultMaxQueueSize is about half a second of the ~30,000 spans/s one
	// exporter sustained to a local Jaeger, so a backend's pause does not
	// drop spans (the SDK's 2,048 dropped them; BENCHMARKS.md).
	DefaultMaxQueueSize = 16384
	// DefaultMaxExportBatchSize halves the export calls of the SDK's 512, so
	// the one export goroutine catches up faster; about 250 KB per OTLP
	// request, well under gRPC's 4 MiB.
	DefaultMaxExportBatchSize = 1024
	DefaultBatchTimeout       = time.Second
	DefaultExportTimeout      = 10 * time.Second
	DefaultShutdownTimeout    = 5 * time.Second
	// DefaultMaxExportBatchBytes keeps an OTLP request well under gRPC's
	// default 4 MiB message limit: past it the receiver refuses the whole
	// request, and every span in it would be lost for one large span.
	DefaultMaxExportBatchBytes = 2 << 20
	// MaxQueueSizeLimit is the largest queue a Processor takes: 1,024
	// times the default, 384 MiB of queue slots allocated up front. A
	// larger OTEL_BSP_MAX_QUEUE_SIZE made make(chan) panic (past what it
	// can size) or exhaust memory before a span was queued.
	MaxQueueSizeLimit = 1 << 24
)

type config struct {
	mp         metric.MeterProvider
	queueSize  int
	batchSize  int
	batchBytes int
	delay      time.Duration
	exportTO   time.Duration
	shutdownTO time.Duration
}

func newConfig(opts []Option) config {
	c := config{
		queueSize:  DefaultMaxQueueSize,
		batchSize:  DefaultMaxExportBatchSize,
		batchBytes: DefaultMaxExportBatchBytes,
		delay:      DefaultBatchTimeout,
		exportTO:   DefaultExportTimeout,
		shutdownTO: DefaultShutdownTimeout,
	}
	for _, o := range opts {
		o.apply(&c)
	}
	c.batchSize = min(c.batchSize, c.queueSize)
	return c
}

// Option configures a Processor.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithMeterProvider sets where llm.spans.dropped is counted (default: the
// global MeterProvider).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.mp = mp })
}

// WithMaxQueueSize bounds the spans waiting for export
// (OTEL_BSP_MAX_QUEUE_SIZE; default DefaultMaxQueueSize). Values below 1
// are 1, above MaxQueueSizeLimit that limit: the queue is allocated
// whole when the Processor starts.
func WithMaxQueueSize(n int) Option {
	return optionFunc(func(c *config) { c.queueSize = min(max(n, 1), MaxQueueSizeLimit) })
}

// WithMaxExportBatchSize sets the largest batch handed to the exporter
// (OTEL_BSP_MAX_EXPORT_BATCH_SIZE; default DefaultMaxExportBatchSize, at
// most the queue size).
func WithMaxExportBatchSize(n int) Option {
	return optionFunc(func(c *config) { c.batchSize = max(n, 1) })
}

// WithBatchTimeout sets how long a partial batch waits before it is
// exported (OTEL_BSP_SCHEDULE_DELAY; default 1 s, at least 1 ms).
func WithBatchTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.delay = max(d, time.Millisecond) })
}

// WithExportTimeout bounds one export call (OTEL_BSP_EXPORT_TIMEOUT;
// default 10 s, at least 1 ms).
func WithExportTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.exportTO = max(d, time.Millisecond) })
}

// WithShutdownTimeout bounds Shutdown when its context has no earlier
// deadline (default 5 s, at least 1 ms).
func WithShutdownTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.shutdownTO = max(d, time.Millisecond) })
}

// WithMaxExportBatchBytes bounds a batch's estimated encoded size (default
// DefaultMaxExportBatchBytes): a batch is exported before a span would take
// it past the bound, and a span larger than the bound by itself is
// exported alone, so it can fail only itself.
func WithMaxExportBatchBytes(n int) Option {
	return optionFunc(func(c *config) { c.batchBytes = max(n, 1) })
}
