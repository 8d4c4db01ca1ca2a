package otelstats

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/goleak"
)

type fakeExporter struct {
	fail    atomic.Bool
	block   chan struct{} // when non-nil, ExportSpans waits for it or ctx
	got     atomic.Int64
	stopped atomic.Bool
}

func (e *fakeExporter) ExportSpans(ctx context.Context, s []sdktrace.ReadOnlySpan) error {
	if e.block != nil {
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
		spans     int
		wantDrop  func(n int64) bool
		wantAllOK bool
	}{
		{name: "healthy", queue: 1024, spans: 500, wantAllOK: true},
		{name: "backend down", queue: 1024, fail: true, spans: 500, wantDrop: func(n int64) bool { return n == 500 }},
		{name: "backend hangs, queue overflows", queue: 64, block: true, spans: 500, wantDrop: func(n int64) bool { return n >= 500-64-64 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			exp := &fakeExporter{}
			exp.fail.Store(tc.fail)
			if tc.block {
				exp.block = make(chan struct{})
			}
			bp := NewBatchProcessor(exp, WithQueueSize(tc.queue), WithExportBatchSize(64),
				WithScheduleDelay(5*time.Millisecond), WithExportTimeout(50*time.Millisecond),
				WithShutdownTimeout(500*time.Millisecond))
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(bp))
			tr := tp.Tracer("t")
			start := time.Now()
			for range tc.spans {
				_, s := tr.Start(context.Background(), "x")
				s.End()
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("ending %d spans took %v: OnEnd must not block", tc.spans, d)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			t0 := time.Now()
			_ = tp.Shutdown(ctx)
			if d := time.Since(t0); d > time.Second {
				t.Errorf("Shutdown took %v, want within its 500ms deadline (+slack)", d)
			}
			time.Sleep(100 * time.Millisecond) // let a blocked export return and be counted
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
