package otelstats

import (
	"context"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/llmtrace/llmtrace/attributes"
)

// BatchProcessor batches ended spans to an exporter like sdktrace's
// BatchSpanProcessor — a bounded queue, a non-blocking enqueue, one export
// goroutine — and counts every span it could not deliver in
// llm.spans.dropped: spans that found the queue full, batches the exporter
// failed, and spans still queued when Shutdown's deadline passed. So
// produced − delivered = dropped, exactly. OnEnd never blocks: when the
// backend is slow or down, the engine loses spans, not time.
//
// The zero BatchProcessor is not usable; create one with NewBatchProcessor.
// It is safe for concurrent use.
type BatchProcessor struct {
	exp     sdktrace.SpanExporter
	cfg     batchConfig
	queue   chan sdktrace.ReadOnlySpan
	flushCh chan chan struct{}
	stop    chan struct{}
	done    chan struct{}
	dropped metric.Int64Counter

	closed                         atomic.Bool
	nProduced, nExported, nDropped atomic.Int64
	once                           sync.Once
}

var _ sdktrace.SpanProcessor = (*BatchProcessor)(nil)

type batchConfig struct {
	mp         metric.MeterProvider
	queueSize  int
	batchSize  int
	delay      time.Duration
	exportTO   time.Duration
	shutdownTO time.Duration
}

// BatchOption configures a BatchProcessor.
type BatchOption func(*batchConfig)

// WithBatchMeterProvider sets where llm.spans.dropped is counted (default:
// the global MeterProvider).
func WithBatchMeterProvider(mp metric.MeterProvider) BatchOption {
	return func(c *batchConfig) { c.mp = mp }
}

// WithQueueSize bounds the spans waiting for export (OTEL_BSP_MAX_QUEUE_SIZE,
// default 16384: about half a second of the ~30,000 spans/s one exporter
// sustained to a local Jaeger, so a backend's pause does not drop spans;
// see BENCHMARKS.md).
func WithQueueSize(n int) BatchOption { return func(c *batchConfig) { c.queueSize = max(n, 1) } }

// WithExportBatchSize sets the largest batch (OTEL_BSP_MAX_EXPORT_BATCH_SIZE,
// default 1024: half the export calls of 512, so the one export goroutine
// catches up faster; about 250 KB per OTLP request, well under gRPC's 4 MiB).
func WithExportBatchSize(n int) BatchOption { return func(c *batchConfig) { c.batchSize = max(n, 1) } }

// WithScheduleDelay sets how long a partial batch waits (OTEL_BSP_SCHEDULE_DELAY,
// default 1 s).
func WithScheduleDelay(d time.Duration) BatchOption {
	return func(c *batchConfig) { c.delay = max(d, time.Millisecond) }
}

// WithExportTimeout bounds one export call (OTEL_BSP_EXPORT_TIMEOUT, default 10 s).
func WithExportTimeout(d time.Duration) BatchOption {
	return func(c *batchConfig) { c.exportTO = max(d, time.Millisecond) }
}

// WithShutdownTimeout bounds Shutdown when its context has no earlier
// deadline (default 5 s).
func WithShutdownTimeout(d time.Duration) BatchOption {
	return func(c *batchConfig) { c.shutdownTO = max(d, time.Millisecond) }
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// NewBatchProcessor starts a BatchProcessor exporting to exp. Its defaults
// come from the standard OTEL_BSP_* variables, then opts.
func NewBatchProcessor(exp sdktrace.SpanExporter, opts ...BatchOption) *BatchProcessor {
	c := batchConfig{
		queueSize:  envInt("OTEL_BSP_MAX_QUEUE_SIZE", 16384),
		batchSize:  envInt("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 1024),
		delay:      time.Duration(envInt("OTEL_BSP_SCHEDULE_DELAY", 1000)) * time.Millisecond,
		exportTO:   time.Duration(envInt("OTEL_BSP_EXPORT_TIMEOUT", 10000)) * time.Millisecond,
		shutdownTO: 5 * time.Second,
	}
	for _, o := range opts {
		o(&c)
	}
	c.batchSize = min(c.batchSize, c.queueSize)
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	p := &BatchProcessor{
		exp:     exp,
		cfg:     c,
		queue:   make(chan sdktrace.ReadOnlySpan, c.queueSize),
		flushCh: make(chan chan struct{}),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	p.dropped, _ = c.mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version())).Int64Counter(
		attributes.MetricSpansDropped, metric.WithUnit(attributes.UnitSpan),
		metric.WithDescription("Spans that could not be exported."))
	go p.run()
	return p
}

// OnStart does nothing.
func (p *BatchProcessor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd enqueues s without blocking; a full queue drops it and counts it.
func (p *BatchProcessor) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	p.nProduced.Add(1)
	if p.closed.Load() {
		p.drop(1)
		return
	}
	select {
	case p.queue <- s:
	default:
		p.drop(1)
	}
}

func (p *BatchProcessor) drop(n int) {
	p.nDropped.Add(int64(n))
	p.dropped.Add(context.Background(), int64(n))
}

// Counts returns the spans produced (sampled spans ended), exported
// (acknowledged by the exporter) and dropped so far. Once the processor is
// shut down, produced == exported + dropped.
func (p *BatchProcessor) Counts() (produced, exported, dropped int64) {
	return p.nProduced.Load(), p.nExported.Load(), p.nDropped.Load()
}

func (p *BatchProcessor) run() {
	defer close(p.done)
	batch := make([]sdktrace.ReadOnlySpan, 0, p.cfg.batchSize)
	tick := time.NewTimer(p.cfg.delay)
	defer tick.Stop()
	failing := false
	export := func(ctx context.Context) {
		if len(batch) == 0 {
			return
		}
		ectx, cancel := context.WithTimeout(ctx, p.cfg.exportTO)
		err := p.exp.ExportSpans(ectx, batch)
		cancel()
		if err != nil {
			p.drop(len(batch))
			// One report per failure streak, not one per batch: a
			// backend that is down must not flood the error handler.
			if !failing {
				otel.Handle(err)
			}
			failing = true
		} else {
			failing = false
			p.nExported.Add(int64(len(batch)))
		}
		clear(batch)
		batch = batch[:0]
	}
	drain := func(ctx context.Context) {
		for {
			select {
			case s := <-p.queue:
				batch = append(batch, s)
				if len(batch) == cap(batch) {
					export(ctx)
				}
			default:
				export(ctx)
				return
			}
		}
	}
	for {
		select {
		case s := <-p.queue:
			batch = append(batch, s)
			if len(batch) == cap(batch) {
				export(context.Background())
			}
		case <-tick.C:
			export(context.Background())
			tick.Reset(p.cfg.delay)
		case ack := <-p.flushCh:
			drain(context.Background())
			close(ack)
		case <-p.stop:
			return
		}
	}
}

// ForceFlush exports everything queued, waiting at most until ctx ends.
func (p *BatchProcessor) ForceFlush(ctx context.Context) error {
	if p.closed.Load() {
		return nil
	}
	ack := make(chan struct{})
	select {
	case p.flushCh <- ack:
	case <-ctx.Done():
		return ctx.Err()
	case <-p.done:
		return nil
	}
	select {
	case <-ack:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown stops accepting spans, exports what is queued and shuts the
// exporter down, all within ctx or the shutdown timeout, whichever is
// earlier; whatever could not be exported by then is counted as dropped.
// Only the first call does anything.
func (p *BatchProcessor) Shutdown(ctx context.Context) error {
	var err error
	p.once.Do(func() {
		ctx, cancel := context.WithTimeout(ctx, p.cfg.shutdownTO)
		defer cancel()
		flushErr := p.ForceFlush(ctx)
		p.closed.Store(true)
		close(p.stop)
		select {
		case <-p.done:
		case <-ctx.Done():
		}
		// What is still queued will not be exported.
		for {
			select {
			case <-p.queue:
				p.drop(1)
				continue
			default:
			}
			break
		}
		expErr := make(chan error, 1)
		go func() { expErr <- p.exp.Shutdown(ctx) }()
		select {
		case err = <-expErr:
		case <-ctx.Done():
			err = ctx.Err()
		}
		if err == nil {
			err = flushErr
		}
	})
	return err
}
