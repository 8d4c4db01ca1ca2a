package batch

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// PartialSuccess has the shape of the SDK's OTLP exporters' error for
// OTLP's partial success (otlptracegrpc/internal.PartialSuccess).
type PartialSuccess struct {
	ErrorMessage  string
	RejectedItems int64
	RejectedKind  string
}

func (p PartialSuccess) Error() string {
	return fmt.Sprintf("OTLP partial success: %s (%d %s rejected)", p.ErrorMessage, p.RejectedItems, p.RejectedKind)
}

func TestRejected(t *testing.T) {
	ps := PartialSuccess{"old", 3, "spans"}
	for _, tc := range []struct {
		name string
		err  error
		n    int64
		ok   bool
	}{
		{"nil", nil, 0, false},
		{"other", errors.New("backend down"), 0, false},
		{"bare", ps, 3, true},
		{"pointer", &ps, 3, true},
		{"nil pointer", (*PartialSuccess)(nil), 0, false},
		{"wrapped", fmt.Errorf("traces export: %w", ps), 3, true},
		{"joined", errors.Join(errors.New("close"), fmt.Errorf("x: %w", ps)), 3, true},
		{"warning", PartialSuccess{ErrorMessage: "truncated"}, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if n, ok := Rejected(tc.err); n != tc.n || ok != tc.ok {
				t.Errorf("Rejected = %d, %v; want %d, %v", n, ok, tc.n, tc.ok)
			}
		})
	}
}

// partialExporter answers every export with a partial success rejecting
// rejected spans.
type partialExporter struct {
	rejected int64
	calls    atomic.Int64
}

func (e *partialExporter) ExportSpans(_ context.Context, s []sdktrace.ReadOnlySpan) error {
	e.calls.Add(1)
	return fmt.Errorf("traces export: %w", PartialSuccess{"too old", e.rejected, "spans"})
}

func (e *partialExporter) Shutdown(context.Context) error { return nil }

// TestPartialSuccessCounts: the spans of an export the backend answered
// with a partial success are exported but for those it rejected, and a run
// of such answers is reported once. Before, the whole batch counted as
// dropped.
func TestPartialSuccessCounts(t *testing.T) {
	for _, tc := range []struct {
		name          string
		rejected      int64
		wantExp, drop int64
	}{
		{"rejects some", 3, 7, 3},
		{"warning only", 0, 10, 0},
		{"rejects all", 10, 0, 10},
		{"rejects more than sent", 1 << 40, 0, 10},
		{"negative", -5, 10, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var reports atomic.Int64
			otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) { reports.Add(1) }))
			t.Cleanup(func() { otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {})) })
			exp := &partialExporter{rejected: tc.rejected}
			sampled := tracetest.SpanStub{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{
				TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled})}.Snapshot()
			p := NewProcessor(exp, WithMaxExportBatchSize(10), WithBatchTimeout(1<<40))
			for range 3 {
				for range 10 {
					p.OnEnd(sampled)
				}
				if err := p.ForceFlush(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			prod, exported, dropped := p.Counts()
			if exp.calls.Load() != 3 || prod != 30 || exported != 3*tc.wantExp || dropped != 3*tc.drop {
				t.Errorf("%d exports; produced %d exported %d dropped %d; want 3; 30, %d, %d",
					exp.calls.Load(), prod, exported, dropped, 3*tc.wantExp, 3*tc.drop)
			}
			if reports.Load() != 1 {
				t.Errorf("%d reports, want 1 for the run", reports.Load())
			}
		})
	}
}
