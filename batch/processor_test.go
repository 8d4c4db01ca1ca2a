package batch

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/goleak"
)

type fakeExporter struct {
	fail    atomic.Bool
	block   chan struct{} // when non-nil, ExportSpans waits for it or ctx
	deaf    bool          // with block: ExportSpans ignores ctx too
	got     atomic.Int64
	stopped atomic.Bool
}

func (e *fakeExporter) ExportSpans(ctx context.Context, s []sdktrace.ReadOnlySpan) error {
	if e.block != nil {
		if e.deaf {
			<-e.block
			return errors.New("answered too late")
		}
		select {
		case <-e.block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if e.fail.Load() {
		return errors.New("backend down")
	}
	e.got.Add(int64(len(s)))
	return nil
}

func (e *fakeExporter) Shutdown(context.Context) error { e.stopped.Store(true); return nil }

func TestBatchProcessorCountsEveryLostSpan(t *testing.T) {
	defer goleak.VerifyNone(t)
	cases := []struct {
		name      string
		queue     int
		fail      bool
		block     bool
		deaf      bool
		spans     int
		wantDrop  func(n int64) bool
		wantAllOK bool
	}{
		{name: "healthy", queue: 1024, spans: 500, wantAllOK: true},
		{name: "backend down", queue: 1024, fail: true, spans: 500, wantDrop: func(n int64) bool { return n == 500 }},
		{name: "backend hangs, queue overflows", queue: 64, block: true, spans: 500, wantDrop: func(n int64) bool { return n == 500 }},
		// An exporter that ignores its context and never answers: the
		// batch in flight at the deadline is counted too (issue 12.8).
		{name: "exporter deaf to its context", queue: 4096, block: true, deaf: true, spans: 3000, wantDrop: func(n int64) bool { return n == 3000 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			exp := &fakeExporter{}
			exp.fail.Store(tc.fail)
			if tc.block {
				exp.block = make(chan struct{})
				exp.deaf = tc.deaf
				defer close(exp.block) // after the checks: a deaf export returns only now
			}
			bp := NewProcessor(exp, WithMaxQueueSize(tc.queue), WithMaxExportBatchSize(64),
				WithBatchTimeout(5*time.Millisecond), WithExportTimeout(time.Hour),
				WithShutdownTimeout(300*time.Millisecond))
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(bp))
			tr := tp.Tracer("t")
			for range tc.spans {
				_, s := tr.Start(context.Background(), "x")
				s.End()
			}
			_ = tp.Shutdown(context.Background())
			// Exact at Shutdown's return, with no wait for exports to come
			// back: that is what an operator reads at exit.
			produced, exported, dropped := bp.Counts()
			if produced != int64(tc.spans) {
				t.Errorf("produced = %d, want %d", produced, tc.spans)
			}
			if produced != exported+dropped {
				t.Errorf("produced %d != exported %d + dropped %d", produced, exported, dropped)
			}
			if exported != exp.got.Load() {
				t.Errorf("exported = %d, exporter received %d", exported, exp.got.Load())
			}
			if tc.wantAllOK && dropped != 0 {
				t.Errorf("dropped = %d, want 0", dropped)
			}
			if tc.wantDrop != nil && !tc.wantDrop(dropped) {
				t.Errorf("dropped = %d, not as expected", dropped)
			}
		})
	}
}

type discard struct{}

// hang never finishes an export until its context ends.
type hang struct{}

func (hang) ExportSpans(ctx context.Context, _ []sdktrace.ReadOnlySpan) error {
	<-ctx.Done()
	return ctx.Err()
}
func (hang) Shutdown(context.Context) error { return nil }

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkProcessor ends spans into this package's Processor and, beside
// it, the SDK's BatchSpanProcessor with the same batch size and a
// discarding exporter: what exact accounting costs per span, when the queue
// has room (enqueue) and when it is full (drop).
func BenchmarkProcessor(b *testing.B) {
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {})) // the hung exports' cancellation
	for _, bc := range []struct {
		name string
		new  func() sdktrace.SpanProcessor
	}{
		{"enqueue/llmtrace", func() sdktrace.SpanProcessor { return NewProcessor(discard{}, WithMaxQueueSize(1<<22)) }},
		{"enqueue/sdk", func() sdktrace.SpanProcessor {
			return sdktrace.NewBatchSpanProcessor(discard{}, sdktrace.WithMaxQueueSize(1<<22),
				sdktrace.WithMaxExportBatchSize(DefaultMaxExportBatchSize))
		}},
		{"drop/llmtrace", func() sdktrace.SpanProcessor { return NewProcessor(hang{}, WithMaxQueueSize(1)) }},
		{"drop/sdk", func() sdktrace.SpanProcessor {
			return sdktrace.NewBatchSpanProcessor(hang{}, sdktrace.WithMaxQueueSize(1), sdktrace.WithMaxExportBatchSize(1))
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			sp := bc.new()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp))
			tr := tp.Tracer("bench")
			_, s := tr.Start(context.Background(), "x")
			s.End()
			ro := s.(sdktrace.ReadOnlySpan)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					sp.OnEnd(ro)
				}
			})
			b.StopTimer()
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			_ = tp.Shutdown(ctx)
		})
	}
}

// sizeLimited fails a batch whose estimated size passes limit, as a gRPC
// receiver refuses a message over its limit.
type sizeLimited struct {
	limit    int
	exported atomic.Int64
}

func (e *sizeLimited) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	n := 0
	for _, s := range spans {
		n += approxSize(s)
	}
	if n > e.limit {
		return errors.New("message larger than max")
	}
	e.exported.Add(int64(len(spans)))
	return nil
}
func (e *sizeLimited) Shutdown(context.Context) error { return nil }

// Issue 12.6: one span too large for the receiver fails alone; the others
// of its batch are exported.
func TestLargeSpanFailsAlone(t *testing.T) {
	exp := &sizeLimited{limit: 4 << 20}
	bp := NewProcessor(exp, WithBatchTimeout(time.Hour))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(bp))
	tr := tp.Tracer("t")
	huge := strings.Repeat("x", 5<<20)
	for i := range 201 {
		_, s := tr.Start(context.Background(), "span")
		if i == 100 {
			s.SetAttributes(attribute.String("stop", huge))
		}
		s.End()
	}
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Logf("shutdown: %v", err)
	}
	produced, exported, dropped := bp.Counts()
	if produced != 201 || exported != 200 || dropped != 1 || exp.exported.Load() != 200 {
		t.Fatalf("produced %d exported %d (receiver %d) dropped %d; want 201, 200, 1", produced, exported, exp.exported.Load(), dropped)
	}
}
