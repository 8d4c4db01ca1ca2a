package batch

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/internal/version"
)

// ScopeName is the instrumentation scope of the processor's own counter.
const ScopeName = "github.com/llmtrace/llmtrace/batch"

// Processor batches ended spans to an exporter and counts every span it
// could not deliver (see the package doc). OnEnd never blocks: when the
// backend is slow or down, the engine loses spans, not time.
//
// The zero Processor is not usable; create one with NewProcessor. It is
// safe for concurrent use.
type Processor struct {
	exp     sdktrace.SpanExporter
	cfg     config
	queue   chan queued
	queuedB atomic.Int64  // the estimated bytes of the spans in queue
	full    chan struct{} // a batch's worth is queued: wake the export goroutine
	flushCh chan chan struct{}
	stop    chan struct{}
	done    chan struct{}
	dropped metric.Int64Counter

	// ctx is every export's parent: Shutdown cancels it when its deadline
	// passes, so a hung export cannot outlast it.
	ctx    context.Context
	cancel context.CancelFunc

	closed atomic.Bool

	// gate is held for reading by every change to the exported and dropped
	// counts, and for writing by Shutdown to settle them: once settled,
	// nothing changes them any more and produced is frozen too.
	gate                           sync.RWMutex
	settled                        atomic.Bool
	produced                       int64 // nProduced when settled
	nProduced, nExported, nDropped atomic.Int64
	// late counts the spans ended once the counts were settled: each is
	// produced and dropped, outside the frozen counts.
	late atomic.Int64
	once sync.Once
}

var _ sdktrace.SpanProcessor = (*Processor)(nil)

// NewProcessor starts a Processor exporting to exp.
func NewProcessor(exp sdktrace.SpanExporter, opts ...Option) *Processor {
	c := newConfig(opts)
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Processor{
		exp:     exp,
		cfg:     c,
		queue:   make(chan queued, c.queueSize),
		full:    make(chan struct{}, 1),
		flushCh: make(chan chan struct{}),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		ctx:     ctx,
		cancel:  cancel,
	}
	p.dropped, _ = c.mp.Meter(ScopeName, metric.WithInstrumentationVersion(version.Version)).Int64Counter(
		attributes.MetricSpansDropped, metric.WithUnit(attributes.UnitSpan),
		metric.WithDescription("Spans that could not be exported."))
	go p.run()
	return p
}

// OnStart does nothing.
func (p *Processor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// queued is a span waiting for the export goroutine, with its estimated
// size.
type queued struct {
	s    sdktrace.ReadOnlySpan
	size int
}

// OnEnd enqueues s without blocking; a full queue, or a processor shut
// down, drops it and counts it.
//
// The export goroutine is not woken per span — a wake-up is a thread
// handoff, two context switches, dearer than the span — but once a batch's
// worth (spans or bytes) is queued, or the batch timeout passes.
func (p *Processor) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	if p.settled.Load() {
		p.late.Add(1)
		p.dropped.Add(context.Background(), 1)
		return
	}
	// Counted before closed is read: a span Shutdown's settle misses is
	// one whose count it does not see either (see settle).
	p.nProduced.Add(1)
	if !p.closed.Load() {
		q := queued{s, approxSize(s)}
		select {
		case p.queue <- q:
			if p.queuedB.Add(int64(q.size)) >= int64(p.cfg.batchBytes) || len(p.queue) >= p.cfg.batchSize {
				select {
				case p.full <- struct{}{}:
				default: // already signalled
				}
			}
			return
		default:
		}
	}
	p.count(0, 1)
}

// count adds to the exported and dropped counts unless they are settled.
func (p *Processor) count(exported, dropped int) {
	p.gate.RLock()
	defer p.gate.RUnlock()
	if p.settled.Load() {
		return
	}
	p.nExported.Add(int64(exported))
	p.addDropped(int64(dropped))
}

func (p *Processor) addDropped(n int64) {
	if n > 0 {
		p.nDropped.Add(n)
		p.dropped.Add(context.Background(), n)
	}
}

// Counts returns the spans produced (sampled spans ended), exported
// (acknowledged by the exporter in time) and dropped so far. Once Shutdown
// has returned, produced == exported + dropped.
func (p *Processor) Counts() (produced, exported, dropped int64) {
	if p.settled.Load() {
		late := p.late.Load()
		return p.produced + late, p.nExported.Load(), p.nDropped.Load() + late
	}
	return p.nProduced.Load(), p.nExported.Load(), p.nDropped.Load()
}

func (p *Processor) run() {
	defer close(p.done)
	b := &batcher{p: p, spans: make([]sdktrace.ReadOnlySpan, 0, p.cfg.batchSize)}
	tick := time.NewTimer(p.cfg.delay)
	defer tick.Stop()
	for {
		// Stopping wins over more work: what is left is Shutdown's.
		select {
		case <-p.stop:
			b.abandon()
			return
		default:
		}
		select {
		case <-p.full:
			b.take()
		case <-tick.C:
			b.take()
			b.export()
			tick.Reset(p.cfg.delay)
		case ack := <-p.flushCh:
			b.drain()
			close(ack)
		case <-p.stop:
			b.abandon()
			return
		}
	}
}

// batcher is the export goroutine's batch.
type batcher struct {
	p       *Processor
	spans   []sdktrace.ReadOnlySpan
	bytes   int // estimated encoded size of spans
	failing bool
	partial bool // the latest exports were partial successes (Rejected): reported once per run, as failures
}

func (b *batcher) add(q queued) {
	b.p.queuedB.Add(-int64(q.size))
	s, n := q.s, q.size
	if len(b.spans) > 0 && b.bytes+n > b.p.cfg.batchBytes {
		b.export()
	}
	b.spans = append(b.spans, s)
	b.bytes += n
	if len(b.spans) == cap(b.spans) || b.bytes >= b.p.cfg.batchBytes {
		b.export()
	}
}

// approxSize estimates s's size in an OTLP request: its strings and a
// fixed cost per field, which is what makes one span large or small.
func approxSize(s sdktrace.ReadOnlySpan) int {
	n := 96 + len(s.Name()) + len(s.Status().Description) + attrsSize(s.Attributes())
	for _, e := range s.Events() {
		n += 24 + len(e.Name) + attrsSize(e.Attributes)
	}
	for _, l := range s.Links() {
		n += 48 + attrsSize(l.Attributes)
	}
	return n
}

func attrsSize(kvs []attribute.KeyValue) int {
	n := 0
	for _, kv := range kvs {
		n += 8 + len(kv.Key) + valueSize(kv.Value)
	}
	return n
}

// valueSize bounds a value's encoding from above, roughly: each element
// of a slice or map is an AnyValue message of its own on the wire (a bool
// takes about four bytes, not one), and a bytes, slice or map value can be
// as large as a string.
func valueSize(v attribute.Value) int {
	switch v.Type() {
	case attribute.STRING:
		return len(v.AsString())
	case attribute.BYTESLICE:
		return len(v.AsByteSlice())
	case attribute.STRINGSLICE:
		n := 0
		for _, s := range v.AsStringSlice() {
			n += 6 + len(s)
		}
		return n
	case attribute.INT64SLICE:
		return 12 * len(v.AsInt64Slice())
	case attribute.FLOAT64SLICE:
		return 12 * len(v.AsFloat64Slice())
	case attribute.BOOLSLICE:
		return 4 * len(v.AsBoolSlice())
	case attribute.SLICE:
		n := 0
		for _, e := range v.AsSlice() {
			n += 4 + valueSize(e)
		}
		return n
	case attribute.MAP:
		return attrsSize(v.AsMap())
	}
	return 8
}

// take adds what is queued now to the batch, exporting each batch that
// fills.
func (b *batcher) take() {
	for {
		select {
		case q := <-b.p.queue:
			b.add(q)
		default:
			return
		}
	}
}

// drain exports everything queued now.
func (b *batcher) drain() {
	b.take()
	b.export()
}

func (b *batcher) export() {
	if len(b.spans) == 0 {
		return
	}
	p := b.p
	ctx, cancel := context.WithTimeout(p.ctx, p.cfg.exportTO)
	err := p.exp.ExportSpans(ctx, b.spans)
	cancel()
	n := len(b.spans)
	if rejected, ok := Rejected(err); ok {
		// Taken, but for the spans the backend rejected (Rejected).
		rejected = min(max(rejected, 0), int64(n))
		p.count(n-int(rejected), int(rejected))
		b.failing = false
		if !b.partial {
			otel.Handle(err)
		}
		b.partial = true
	} else if err != nil {
		p.count(0, n)
		// One report per failure streak, not one per batch: a backend
		// that is down must not flood the error handler.
		if !b.failing {
			otel.Handle(err)
		}
		b.failing = true
	} else {
		b.failing, b.partial = false, false
		p.count(n, 0)
	}
	b.reset()
}

// abandon counts what the batch holds as dropped: the processor stopped
// before it was exported.
func (b *batcher) abandon() {
	b.p.count(0, len(b.spans))
	b.reset()
}

func (b *batcher) reset() {
	clear(b.spans)
	b.spans = b.spans[:0]
	b.bytes = 0
}

// ForceFlush exports everything queued, waiting at most until ctx ends.
// After Shutdown it returns nil at once.
func (p *Processor) ForceFlush(ctx context.Context) error {
	ack := make(chan struct{})
	select {
	case p.flushCh <- ack:
	case <-ctx.Done():
		return ctx.Err()
	case <-p.done:
		return nil
	case <-p.stop:
		// Shut down: nothing is queued any more, and an export the
		// deadline left hung must not hold this call too.
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
// earlier. Whatever was not exported by then — queued, in a batch, or in an
// export the deadline cut short — is counted as dropped, once, and the
// counts are settled: produced == exported + dropped from then on. Only
// the first call does anything.
func (p *Processor) Shutdown(ctx context.Context) error {
	var err error
	p.once.Do(func() {
		ctx, cancel := context.WithTimeout(ctx, p.cfg.shutdownTO)
		defer cancel()
		p.closed.Store(true)
		flushErr := p.ForceFlush(ctx)
		close(p.stop)
		select {
		case <-p.done:
		case <-ctx.Done():
			p.cancel() // a hung export returns now, if its exporter honours ctx
		}
		p.settle()
		err = p.shutdownExporter(ctx)
		if err == nil {
			err = flushErr
		}
		p.cancel()
	})
	return err
}

// settle counts every produced span neither exported nor dropped yet as
// dropped and freezes the counts. An OnEnd racing it either counted its span
// as produced before settle read the count — then the span is in the
// difference, and its own drop, if any, comes after the freeze and is
// ignored — or after, and then the span is in none of the frozen counts.
func (p *Processor) settle() {
	p.gate.Lock()
	defer p.gate.Unlock()
	p.produced = p.nProduced.Load()
	p.addDropped(p.produced - p.nExported.Load() - p.nDropped.Load())
	p.settled.Store(true)
	for {
		select {
		case <-p.queue: // release them; already counted
		default:
			return
		}
	}
}

func (p *Processor) shutdownExporter(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- p.exp.Shutdown(ctx) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
