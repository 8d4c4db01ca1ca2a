package e2e

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"

	"github.com/llmtrace/llmtrace/batch"
	"github.com/llmtrace/llmtrace/e2e/testbackend"
	"github.com/llmtrace/llmtrace/internal/loadgen"
	"github.com/llmtrace/llmtrace/otelstats"
	"github.com/llmtrace/llmtrace/spans"
)

// jaegerSpans sums one of Jaeger's own span counters (e.g.
// otelcol_receiver_accepted_spans) from its Prometheus metrics.
func jaegerSpans(t *testing.T, j *testbackend.Jaeger, metric string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.MetricsURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scraping Jaeger's metrics: %v", err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	var n int64
	sc := bufio.NewScanner(&buf)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok := strings.Cut(line, "{")
		if !ok || (name != metric && name != metric+"_total") {
			continue
		}
		_, val, _ := strings.Cut(rest, "} ")
		if f := strings.Fields(val); len(f) > 0 {
			v, err := strconv.ParseFloat(f[0], 64)
			if err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			n += int64(v)
		}
	}
	return n
}

// slowExporter delays every export: a backend slower than the engine.
type slowExporter struct {
	sdktrace.SpanExporter
	delay time.Duration
}

func (e slowExporter) ExportSpans(ctx context.Context, s []sdktrace.ReadOnlySpan) error {
	select {
	case <-time.After(e.delay):
	case <-ctx.Done():
		return ctx.Err()
	}
	return e.SpanExporter.ExportSpans(ctx, s)
}

// newLoad wires a loadgen.Runner to Jaeger over OTLP gRPC through a
// BatchProcessor with opts (wrap, when set, wraps the exporter).
func newLoad(t *testing.T, j *testbackend.Jaeger, wrap func(sdktrace.SpanExporter) sdktrace.SpanExporter, opts ...batch.Option) (*loadgen.Runner, *batch.Processor) {
	t.Helper()
	var exp sdktrace.SpanExporter
	exp, err := otlptracegrpc.New(context.Background(), otlptracegrpc.WithEndpoint(j.OTLPGRPCEndpoint()), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	if wrap != nil {
		exp = wrap(exp)
	}
	mp := noop.NewMeterProvider()
	bp := batch.NewProcessor(exp, append([]batch.Option{batch.WithMeterProvider(mp)}, opts...)...)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(bp), sdktrace.WithIDGenerator(spans.IDGenerator()),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("load-"+strconv.FormatInt(time.Now().UnixNano(), 36)))))
	tr, err := otelstats.NewTracker(otelstats.WithTracerProvider(tp), otelstats.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := tr.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		if err := tp.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
	return loadgen.New(tr, bp), bp
}

// TestLoadAgainstJaeger drives the tracker through the load generator of
// `llmtrace load` with OTLP gRPC export to a real Jaeger:
//
//   - at a rate the machine sustains, nothing is dropped and Jaeger's OTLP
//     receiver accepted (and its storage exporter stored) every span;
//   - far past capacity — flat out, a tiny queue, every export slowed to
//     1 s — spans are dropped and counted so that produced = exported +
//     dropped exactly, Jaeger accepted exactly the exported ones, and no
//     engine step waited on an export (each would take ≥ 1 s).
//
// It asserts structure, not throughput: the machine may be slow and busy.
func TestLoadAgainstJaeger(t *testing.T) {
	j := testbackend.StartJaeger(t)
	ctx := context.Background()

	// (a) Sustainable: 300 requests/s (1,800 spans/s) for 3 s, the
	// default queue and batch, a short delay so the run ends flushed.
	r, bp := newLoad(t, j, nil, batch.WithMaxQueueSize(8192), batch.WithMaxExportBatchSize(512),
		batch.WithBatchTimeout(100*time.Millisecond))
	a, err := r.Run(ctx, loadgen.Config{Rate: 300, Duration: 3 * time.Second, InFlight: 64})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sustainable: %s", strings.Join(a.Fields(), " "))
	done := a.Completed + a.Drained
	if a.Shed != 0 || a.Rejected != 0 || done != a.Offered || done == 0 {
		t.Errorf("offered %d, completed %d, shed %d, rejected %d", a.Offered, done, a.Shed, a.Rejected)
	}
	if a.Dropped != 0 || a.Produced != a.Exported || a.Produced != done*loadgen.SpansPerRequest {
		t.Errorf("produced %d (want %d), exported %d, dropped %d", a.Produced, done*loadgen.SpansPerRequest, a.Exported, a.Dropped)
	}
	if got := jaegerSpans(t, j, "otelcol_receiver_accepted_spans"); got != a.Exported {
		t.Errorf("Jaeger's receiver accepted %d spans, the processor exported %d", got, a.Exported)
	}
	// Jaeger batches before storing (50 ms here): wait for all of them.
	var stored int64
	for until := time.Now().Add(20 * time.Second); time.Now().Before(until); time.Sleep(50 * time.Millisecond) {
		if stored = jaegerSpans(t, j, "otelcol_exporter_sent_spans"); stored >= a.Exported {
			break
		}
	}
	if stored != a.Exported {
		t.Errorf("Jaeger stored %d spans, want %d", stored, a.Exported)
	}
	if p, e, d := bp.Counts(); p != e+d {
		t.Errorf("processor: produced %d, exported %d, dropped %d", p, e, d)
	}

	// (b) Far past capacity.
	before := jaegerSpans(t, j, "otelcol_receiver_accepted_spans")
	const exportDelay = time.Second
	r, bp = newLoad(t, j, func(e sdktrace.SpanExporter) sdktrace.SpanExporter { return slowExporter{e, exportDelay} },
		batch.WithMaxQueueSize(256), batch.WithMaxExportBatchSize(128),
		batch.WithBatchTimeout(50*time.Millisecond), batch.WithExportTimeout(5*time.Second))
	b, err := r.Run(ctx, loadgen.Config{Duration: 2 * time.Second, InFlight: 64})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("past capacity: %s", strings.Join(b.Fields(), " "))
	done = b.Completed + b.Drained
	if b.Rejected != 0 || done != b.Offered || b.Produced != done*loadgen.SpansPerRequest {
		t.Errorf("offered %d, completed %d, rejected %d, produced %d spans", b.Offered, done, b.Rejected, b.Produced)
	}
	if b.Dropped == 0 || b.Exported == 0 || b.Produced != b.Exported+b.Dropped {
		t.Errorf("produced %d, exported %d, dropped %d: want some of each, produced = exported + dropped", b.Produced, b.Exported, b.Dropped)
	}
	if b.Sustained() {
		t.Error("a level that dropped spans counts as sustained")
	}
	if got := jaegerSpans(t, j, "otelcol_receiver_accepted_spans") - before; got != b.Exported {
		t.Errorf("Jaeger's receiver accepted %d spans, the processor exported %d", got, b.Exported)
	}
	if p, e, d := bp.Counts(); p != e+d {
		t.Errorf("processor: produced %d, exported %d, dropped %d", p, e, d)
	}
	// Every export takes ≥ 1 s: a step that waited on one would too. The
	// bound for p99 leaves room for a loaded machine's scheduling and GC.
	if b.StepMax >= exportDelay || b.StepP99 >= exportDelay/4 {
		t.Errorf("step p99 %v, max %v: with every export taking %v, the engine loop waited on export", b.StepP99, b.StepMax, exportDelay)
	}
	t.Logf("step latency: sustainable p50 %v p99 %v max %v; past capacity p50 %v p99 %v max %v",
		a.StepP50, a.StepP99, a.StepMax, b.StepP50, b.StepP99, b.StepMax)
}
