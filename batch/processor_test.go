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
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/llmtrace/llmtrace/internal/otlpwire"
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
// sizeLimited is a receiver that refuses a request larger than limit, as
// a collector's gRPC server does past its max message size; the request is
// what llmtrace's own encoder sends (internal/otlpwire), measured on the
// wire, so the processor's estimate is checked, not trusted.
type sizeLimited struct {
	limit    int
	exported atomic.Int64
}

func (c *sizeLimited) Start(context.Context) error { return nil }
func (c *sizeLimited) Stop(context.Context) error  { return nil }
func (c *sizeLimited) UploadTraces(_ context.Context, rs []*tracepb.ResourceSpans) error {
	req := &coltracepb.ExportTraceServiceRequest{ResourceSpans: rs}
	if proto.Size(req) > c.limit {
		return errors.New("message larger than max")
	}
	// The encoder's bytes ride as unknown fields: decode to count spans.
	b, err := proto.Marshal(req)
	if err != nil {
		return err
	}
	var got coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &got); err != nil {
		return err
	}
	for _, r := range got.ResourceSpans {
		for _, ss := range r.ScopeSpans {
			c.exported.Add(int64(len(ss.Spans)))
		}
	}
	return nil
}

// bigInts is n int64s of ten bytes each as varints.
func bigInts(n int) []int64 {
	v := make([]int64, n)
	for i := range v {
		v[i] = -1
	}
	return v
}

// Issue 12.6: one span too large for the receiver fails alone; the others
// of its batch are exported — whatever type of attribute makes it large.
func TestLargeSpanFailsAlone(t *testing.T) {
	huge := strings.Repeat("x", 5<<20)
	for _, kv := range []attribute.KeyValue{
		attribute.String("stop", huge),
		attribute.KeyValue{Key: "body", Value: attribute.ByteSliceValue([]byte(huge))},
		attribute.KeyValue{Key: "body", Value: attribute.MapValue(attribute.String("text", huge))},
		attribute.KeyValue{Key: "body", Value: attribute.SliceValue(attribute.StringValue(huge))},
		attribute.BoolSlice("flags", make([]bool, 3<<19)),
		attribute.Int64Slice("ids", bigInts(1<<19)),
	} {
		t.Run(kv.Value.Type().String(), func(t *testing.T) {
			client := &sizeLimited{limit: 4 << 20}
			exp, err := otlpwire.New(context.Background(), client)
			if err != nil {
				t.Fatal(err)
			}
			bp := NewProcessor(exp, WithBatchTimeout(time.Hour))
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(bp))
			tr := tp.Tracer("t")
			for i := range 201 {
				_, s := tr.Start(context.Background(), "span")
				if i == 100 {
					s.SetAttributes(kv)
				}
				s.End()
			}
			if err := tp.Shutdown(context.Background()); err != nil {
				t.Logf("shutdown: %v", err)
			}
			produced, exported, dropped := bp.Counts()
			if produced != 201 || exported != 200 || dropped != 1 || client.exported.Load() != 200 {
				t.Fatalf("produced %d exported %d (receiver %d) dropped %d; want 201, 200, 1", produced, exported, client.exported.Load(), dropped)
			}
		})
	}
}

// TestFullBatchExportsBeforeTheTimeout: the export goroutine, which is not
// woken per span, is woken once a batch's worth is queued — by count or by
// estimated size — and exports it without waiting for the batch timeout.
func TestFullBatchExportsBeforeTheTimeout(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, tc := range []struct {
		name  string
		opts  []Option
		attr  string
		spans int
	}{
		{"count", []Option{WithMaxExportBatchSize(8)}, "", 8},
		{"bytes", []Option{WithMaxExportBatchSize(1024), WithMaxExportBatchBytes(64 << 10)}, strings.Repeat("x", 20<<10), 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exp := &fakeExporter{}
			bp := NewProcessor(exp, append(tc.opts, WithBatchTimeout(time.Hour))...)
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(bp))
			defer func() { _ = tp.Shutdown(context.Background()) }()
			tr := tp.Tracer("t")
			for range tc.spans {
				_, s := tr.Start(context.Background(), "span")
				s.SetAttributes(attribute.String("a", tc.attr))
				s.End()
			}
			deadline := time.Now().Add(10 * time.Second)
			for exp.got.Load() == 0 {
				if time.Now().After(deadline) {
					t.Fatal("a full batch waited for the batch timeout")
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
}

// TestAfterShutdown: once shut down — its last export hung in an exporter
// deaf to its context — ForceFlush returns at once rather than wait for
// that export, and a span ended then is dropped and counted (produced and
// dropped, in Counts and llm.spans.dropped), not lost from both.
func TestAfterShutdown(t *testing.T) {
	exp := &fakeExporter{block: make(chan struct{}), deaf: true}
	defer close(exp.block)
	bp := NewProcessor(exp, WithMaxQueueSize(128), WithMaxExportBatchSize(16), WithBatchTimeout(time.Millisecond),
		WithShutdownTimeout(100*time.Millisecond))
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	for range 300 {
		_, s := tp.Tracer("t").Start(context.Background(), "x")
		s.End()
	}
	ended := rec.Ended()
	for _, s := range ended[:200] {
		bp.OnEnd(s)
	}
	_ = bp.Shutdown(context.Background())
	flushed := make(chan error, 1)
	go func() { flushed <- bp.ForceFlush(context.Background()) }()
	select {
	case err := <-flushed:
		if err != nil {
			t.Errorf("ForceFlush after Shutdown: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("ForceFlush after Shutdown waited for the hung export")
	}
	p0, _, d0 := bp.Counts()
	for _, s := range ended[200:] {
		bp.OnEnd(s)
	}
	produced, exported, dropped := bp.Counts()
	if produced != p0+100 || dropped != d0+100 || produced != exported+dropped {
		t.Errorf("after 100 late spans: produced %d (was %d), exported %d, dropped %d (was %d)", produced, p0, exported, dropped, d0)
	}
}
