package llmtraceconnector

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/connector/connectortest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/otelcol/internal/spantest"
)

// vllmBatch is one delivery of vLLM request spans, span i with trace id
// {i, 1} and span id {i, 2}.
func vllmBatch(ids ...byte) ptrace.Traces {
	td := ptrace.NewTraces()
	ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
	ss.Scope().SetName("vllm.llm_engine")
	for _, i := range ids {
		spantest.VLLM(ss, pcommon.TraceID{i, 1}, pcommon.SpanID{i, 2}, t0, 0.3, 1.0, 0.05, 0.2, 0.6, 10, 5, "stop")
	}
	return td
}

// runWithTelemetry is runConnector with the collector's own telemetry
// recorded in tel.
func runWithTelemetry(t *testing.T, tel *componenttest.Telemetry, cfg *Config, tds ...ptrace.Traces) map[string]point {
	t.Helper()
	set := connectortest.NewNopSettings(Type)
	set.TelemetrySettings = tel.NewTelemetrySettings()
	sink := new(consumertest.MetricsSink)
	c, err := NewFactory().CreateTracesToMetrics(context.Background(), set, cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	for _, td := range tds {
		if err := c.ConsumeTraces(context.Background(), td); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	all := sink.AllMetrics()
	if len(all) == 0 {
		t.Fatal("no metrics emitted")
	}
	got, _ := fromPdata(all[len(all)-1])
	return got
}

func requestsCounted(got map[string]point) int64 {
	var n int64
	for k, p := range got {
		if strings.HasPrefix(k, attributes.MetricRequests+"{") {
			n += p.value
		}
	}
	return n
}

func duplicatesDropped(t *testing.T, tel *componenttest.Telemetry) int64 {
	t.Helper()
	m, err := tel.GetMetric(duplicateSpansMetric)
	if err != nil {
		return 0
	}
	var n int64
	for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
		n += dp.Value
	}
	return n
}

// A request span delivered twice (an OTLP exporter retrying after a
// timeout although the first send arrived, a collector's queue re-sending)
// is one request: it is counted once, in every metric, and the drop is
// counted in the collector's own telemetry.
func TestConnectorCountsARedeliveredSpanOnce(t *testing.T) {
	tel := componenttest.NewTelemetry()
	defer tel.Shutdown(context.Background())
	// The retry alone, and the retry batched with a new span.
	got := runWithTelemetry(t, tel, createDefaultConfig().(*Config), vllmBatch(1, 2), vllmBatch(1), vllmBatch(2, 3))
	if n := requestsCounted(got); n != 3 {
		t.Errorf("%s counted %d requests from 3 distinct spans, 2 of them delivered twice", attributes.MetricRequests, n)
	}
	for k, p := range got {
		if strings.HasPrefix(k, "gen_ai.server.request.duration{") && p.count != 3 {
			t.Errorf("%s counted %d requests, want 3", k, p.count)
		}
		if strings.HasPrefix(k, "llm.server.prompt_tokens{") && p.value != 30 {
			t.Errorf("%s = %d, want 30", k, p.value)
		}
	}
	if n := duplicatesDropped(t, tel); n != 2 {
		t.Errorf("%s = %d, want 2", duplicateSpansMetric, n)
	}

	// Both copies in one batch (a batch processor merging the retry in).
	tel2 := componenttest.NewTelemetry()
	defer tel2.Shutdown(context.Background())
	if n := requestsCounted(runWithTelemetry(t, tel2, createDefaultConfig().(*Config), vllmBatch(4, 4, 5))); n != 2 {
		t.Errorf("a batch holding one span twice counted %d requests, want 2", n)
	}
}

// dedup_spans bounds what is remembered: with 2, a span re-delivered after
// two newer ones is counted again; with 0 nothing is remembered.
func TestConnectorDedupIsBounded(t *testing.T) {
	for _, c := range []struct {
		window     int
		want, dups int64
	}{
		{2, 4, 1}, // 1 2 3 1 3: the second 1 is past the window, the second 3 is not
		{3, 3, 2},
		{0, 5, 0},
	} {
		tel := componenttest.NewTelemetry()
		cfg := createDefaultConfig().(*Config)
		cfg.DedupSpans = c.window
		got := runWithTelemetry(t, tel, cfg, vllmBatch(1, 2, 3), vllmBatch(1), vllmBatch(3))
		if n := requestsCounted(got); n != c.want {
			t.Errorf("dedup_spans %d: %d requests counted, want %d", c.window, n, c.want)
		}
		if n := duplicatesDropped(t, tel); n != c.dups {
			t.Errorf("dedup_spans %d: %d duplicates dropped, want %d", c.window, n, c.dups)
		}
		_ = tel.Shutdown(context.Background())
	}
}

func TestConfigValidateDedupSpans(t *testing.T) {
	for n, ok := range map[int]bool{-1: false, 0: true, 1: true, 100_000: true, maxDedupSpans: true, maxDedupSpans + 1: false} {
		c := createDefaultConfig().(*Config)
		c.DedupSpans = n
		if err := c.Validate(); (err == nil) != ok {
			t.Errorf("dedup_spans %d: Validate() = %v", n, err)
		}
	}
	if d := createDefaultConfig().(*Config).DedupSpans; d != 100_000 {
		t.Errorf("default dedup_spans %d", d)
	}
}

// Spans without ids share them with every other such span: none is taken
// for another's duplicate.
func TestConnectorDoesNotDedupEmptyIDs(t *testing.T) {
	td := ptrace.NewTraces()
	ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
	for range 3 {
		spantest.VLLM(ss, pcommon.TraceID{}, pcommon.SpanID{}, t0, 0.3, 1.0, 0.05, 0.2, 0.6, 10, 5, "stop")
	}
	spantest.VLLM(ss, pcommon.TraceID{1}, pcommon.SpanID{}, t0, 0.3, 1.0, 0.05, 0.2, 0.6, 10, 5, "stop")
	spantest.VLLM(ss, pcommon.TraceID{1}, pcommon.SpanID{}, t0, 0.3, 1.0, 0.05, 0.2, 0.6, 10, 5, "stop")
	if n := requestsCounted(runWithTelemetry(t, componenttest.NewTelemetry(), createDefaultConfig().(*Config), td)); n != 5 {
		t.Errorf("%d requests counted from 5 spans without ids, want 5", n)
	}
}

// Deliveries of one batch on several goroutines at once (a collector's
// concurrent exporters and receivers) count each span once.
func TestConnectorDedupConcurrent(t *testing.T) {
	tel := componenttest.NewTelemetry()
	defer tel.Shutdown(context.Background())
	set := connectortest.NewNopSettings(Type)
	set.TelemetrySettings = tel.NewTelemetrySettings()
	sink := new(consumertest.MetricsSink)
	c, err := NewFactory().CreateTracesToMetrics(context.Background(), set, createDefaultConfig(), sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	ids := make([]byte, 200)
	for i := range ids {
		ids[i] = byte(i)
	}
	var wg sync.WaitGroup
	for range 4 {
		td := vllmBatch(ids...)
		wg.Go(func() {
			if err := c.ConsumeTraces(context.Background(), td); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if err := c.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, _ := fromPdata(sink.AllMetrics()[len(sink.AllMetrics())-1])
	if n := requestsCounted(got); n != 200 {
		t.Errorf("%d requests counted, want 200", n)
	}
	if n := duplicatesDropped(t, tel); n != 600 {
		t.Errorf("%d duplicates dropped, want 600", n)
	}
}

// recentSpans against a plain model of "the last n distinct spans": small
// tables, ids from a small universe so most lookups hit, and the clusters
// that backward-shift deletion must keep reachable.
func TestRecentSpansMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 3, 7, 8, 64, 1000} {
		s := newRecentSpans(n)
		var order []uint64
		in := map[uint64]bool{}
		universe := uint64(3*n + 2)
		for step := range 20000 {
			k := rng.Uint64N(universe) + 1
			tid := pcommon.TraceID{byte(k), byte(k >> 8), 9}
			sid := pcommon.SpanID{byte(k >> 16), 1}
			want := in[k]
			if got := s.seen(tid, sid); got != want {
				t.Fatalf("n %d, step %d: seen(%d) = %v, want %v", n, step, k, got, want)
			}
			if !want {
				order = append(order, k)
				in[k] = true
				if len(order) > n {
					delete(in, order[0])
					order = order[1:]
				}
			}
		}
		used := 0
		for _, fp := range s.table {
			if fp != 0 {
				used++
			}
		}
		if used != n || len(s.ring) != n || len(s.table) > 4*n || len(s.table) < 2*n {
			t.Errorf("n %d: %d fingerprints in a table of %d, ring %d", n, used, len(s.table), len(s.ring))
		}
	}
	if newRecentSpans(0).seen(pcommon.TraceID{1}, pcommon.SpanID{1}) {
		t.Error("dedup off took a span for a duplicate")
	}
}

// Remembering a span does not allocate once the memory is there.
func TestRecentSpansDoesNotAllocate(t *testing.T) {
	s := newRecentSpans(100)
	s.seen(pcommon.TraceID{1}, pcommon.SpanID{1})
	var i uint64
	if n := testing.AllocsPerRun(1000, func() {
		i++
		s.seen(pcommon.TraceID{byte(i), byte(i >> 8)}, pcommon.SpanID{1})
	}); n != 0 {
		t.Errorf("seen allocates %v times", n)
	}
}
