package otelstats

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/internal/textcap"
)

// KeepAlive moves a request's TTL on without recording anything: a
// stream whose deliveries an HTTP layer holds is not abandoned while it
// flows, and is once it stops.
func TestKeepAlive(t *testing.T) {
	h := newHarness(t, WithRequestTTL(time.Minute))
	q, err := h.tr.Arrive(context.Background(), "held", Arrival{Time: at(0), Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { q.KeepAlive(at(59_000)) }); n != 0 {
		t.Errorf("KeepAlive allocates %v", n)
	}
	h.tr.Sweep(at(61_000))
	if len(h.stats) != 0 || h.tr.InFlight() != 1 {
		t.Fatal("abandoned within a minute of its KeepAlive")
	}
	q.KeepAlive(at(-1))           // out of bounds: ignored
	(&Request{}).KeepAlive(at(1)) // a rejected arrival's handle
	h.tr.Sweep(at(119_000))       // a minute after the last KeepAlive
	s := h.statsOf("held")
	if s.FinishReason != FinishAbandoned {
		t.Fatalf("reason %q, want abandoned", s.FinishReason)
	}
	wantLatency(t, "e2e ends at the last update, not the KeepAlive", s.E2ELatency, 0)
	q.KeepAlive(at(120_000)) // finished: ignored
}

func TestAbandonedAfterTTL(t *testing.T) {
	h := newHarness(t, WithRequestTTL(time.Minute))
	h.must(Update{RequestID: "gone", Kind: KindArrived, Time: at(0), Model: "m"})
	h.must(Update{RequestID: "gone", Kind: KindQueued, Time: at(5)})
	h.must(Update{RequestID: "gone", Kind: KindPrefilling, Time: at(10), NumComputedTokens: 4})
	h.must(Update{RequestID: "gone", Kind: KindDecoding, Time: at(50)})
	// Another request keeps the clock moving.
	h.must(Update{RequestID: "alive", Kind: KindArrived, Time: at(59_000), Model: "m"})
	if len(h.stats) != 0 {
		t.Fatal("ended before the TTL")
	}
	h.tr.Sweep(at(60_050)) // 60 s after the last update at 50 ms
	s := h.statsOf("gone")
	if s.FinishReason != FinishAbandoned || s.ErrorType != FinishAbandoned {
		t.Fatalf("reason %q error.type %q, want abandoned", s.FinishReason, s.ErrorType)
	}
	wantLatency(t, "e2e ends at the last update", s.E2ELatency, 50)
	wantLatency(t, "ttft", s.FirstTokenLatency, 50)
	if n := h.counter(attributes.MetricRequests, attributes.FinishReason.String(FinishAbandoned)); n != 1 {
		t.Fatalf("abandoned requests counted %d, want 1", n)
	}
	names := map[string]bool{}
	for _, sp := range h.rec.Ended() {
		names[sp.Name()] = true
	}
	for _, n := range []string{"chat m", attributes.SpanQueue, attributes.SpanPrefill, attributes.SpanDecode} {
		if !names[n] {
			t.Errorf("partial span %s not exported", n)
		}
	}
	if h.tr.InFlight() != 1 {
		t.Fatalf("in flight %d, want 1", h.tr.InFlight())
	}
}

func TestInFlightCapEvictsOldest(t *testing.T) {
	h := newHarness(t, WithMaxInFlight(1))
	h.must(Update{RequestID: "old", Kind: KindArrived, Time: at(0), Model: "m"})
	h.must(Update{RequestID: "new", Kind: KindArrived, Time: at(1), Model: "m"})
	// The cap is per tracker; eviction takes the oldest of the arriving
	// request's shard, so with one request per shard the total may exceed
	// the cap by at most the shard count.
	if h.tr.InFlight() > 1+numShards {
		t.Fatalf("in flight %d", h.tr.InFlight())
	}
	for i := range 200 {
		h.must(Update{RequestID: "r" + strconv.Itoa(i), Kind: KindArrived, Time: at(float64(2 + i)), Model: "m"})
	}
	if n := h.tr.InFlight(); n > numShards+1 {
		t.Fatalf("in flight %d after 200 arrivals with cap 1, want at most %d", n, numShards+1)
	}
	ev := h.counter(attributes.MetricRequestsEvicted)
	if ev < 150 {
		t.Fatalf("evicted %d, want most of 202", ev)
	}
	if n := h.counter(attributes.MetricRequests, attributes.FinishReason.String(FinishEvicted)); n != ev {
		t.Fatalf("requests{evicted} = %d, evicted counter %d", n, ev)
	}
}

// A flood of random model names keeps the metric series bounded.
// TestConfiguredNamesMatchAsCut: a configured model or adapter longer than
// the cap, or not UTF-8, matches the arriving name, which is cut and
// cleaned the same way; it fell into "other" before.
func TestConfiguredNamesMatchAsCut(t *testing.T) {
	long := strings.Repeat("m", MaxModelLength+10)
	bad := "lora-\xff"
	h := newHarness(t, WithModels(long), WithAdapters(bad))
	h.must(Update{RequestID: "a", Kind: KindArrived, Time: at(0), Model: long, LoRAAdapter: bad})
	h.must(Update{RequestID: "a", Kind: KindFinished, Time: at(1), FinishReason: "stop"})
	cut, _ := textcap.Clean(long, MaxModelLength)
	clean, _ := textcap.Clean(bad, MaxModelLength)
	if n := h.counter(attributes.MetricRequests, attributes.RequestModel.String(cut), attributes.LoRAAdapter.String(clean)); n != 1 {
		t.Errorf("the configured model and adapter counted %d times under their own names, want 1", n)
	}
}

func TestModelCardinalityBounded(t *testing.T) {
	for _, fixed := range []bool{false, true} {
		t.Run(fmt.Sprint("fixed=", fixed), func(t *testing.T) {
			var opts []Option
			if fixed {
				opts = append(opts, WithModels("llama", "qwen"))
			}
			h := newHarness(t, opts...)
			for i := range 2000 {
				id := "r" + strconv.Itoa(i)
				model := fmt.Sprintf("model-%x", rand.Uint64())
				if i%3 == 0 {
					model = "llama"
				}
				h.must(Update{RequestID: id, Kind: KindArrived, Time: at(float64(i)), Model: model})
				h.must(Update{RequestID: id, Kind: KindFinished, Time: at(float64(i) + 0.5), FinishReason: "stop"})
			}
			d := h.metrics()[attributes.MetricRequests].(metricdata.Sum[int64])
			limit := DefaultMaxModels + 1
			if fixed {
				limit = 2
			}
			if len(d.DataPoints) > limit {
				t.Fatalf("%d series for llm.server.requests, want ≤ %d", len(d.DataPoints), limit)
			}
			var total int64
			for _, p := range d.DataPoints {
				total += p.Value
			}
			if total != 2000 {
				t.Fatalf("counted %d requests, want 2000", total)
			}
			if n := h.counter(attributes.MetricRequests, attributes.RequestModel.String("llama")); n != 667 {
				t.Fatalf("llama kept its name for %d requests, want 667", n)
			}
		})
	}
}

// TestLabelCardinalityBounded: a producer inventing an operation, a finish
// reason and an error type per request (issue: 5,000 requests made 5,000
// series on collect's /metrics) gets a bounded number of series; the
// values users know keep their names, every request is counted.
func TestLabelCardinalityBounded(t *testing.T) {
	h := newHarness(t)
	const n = 3000
	for i := range n {
		id := "r" + strconv.Itoa(i)
		op, reason, errType := fmt.Sprintf("op-%d", i), fmt.Sprintf("fr-%d", i), fmt.Sprintf("et-%d", i)
		if i%3 == 0 {
			op, reason, errType = "chat", FinishError, "timeout"
		}
		h.must(Update{RequestID: id, Kind: KindArrived, Time: at(float64(i)), Model: "m", Operation: op})
		h.must(Update{RequestID: id, Kind: KindFinished, Time: at(float64(i) + 0.5), FinishReason: reason, ErrorType: errType})
	}
	distinct := func(name string, key attribute.Key) int {
		seen := map[string]bool{}
		for _, set := range attrSetsOf(h.metrics()[name]) {
			if v, ok := set.Value(key); ok {
				seen[v.String()] = true
			}
		}
		return len(seen)
	}
	for _, c := range []struct {
		metric string
		key    attribute.Key
		limit  int
	}{
		{attributes.MetricRequests, attributes.OperationName, len(seedOperations) + maxExtraOperations + 1},
		{attributes.MetricRequests, attributes.FinishReason, len(seedReasons) + maxExtraReasons + 1},
		{attributes.MetricRequestDuration, attributes.ErrorType, maxErrorTypes + 1},
	} {
		if d := distinct(c.metric, c.key); d > c.limit {
			t.Errorf("%s: %d values of %s, want ≤ %d", c.metric, d, c.key, c.limit)
		}
	}
	h.wantCounter(attributes.MetricRequests, n)
	if got := h.counter(attributes.MetricRequests, attributes.OperationName.String("chat"),
		attributes.FinishReason.String(FinishError)); got != n/3 {
		t.Errorf("chat/error kept its names for %d requests, want %d", got, n/3)
	}
	if got, _ := h.hist(attributes.MetricRequestDuration, attributes.ErrorType.String("timeout")); got != n/3 {
		t.Errorf("error.type timeout kept for %d requests, want %d", got, n/3)
	}
	if got := h.counter(attributes.MetricRequests, attributes.FinishReason.String(attributes.OtherModel)); got == 0 {
		t.Error("no request counted under reason other")
	}
	// The spans keep what the producer said.
	s := h.statsOf("r2999")
	if s.FinishReason != "fr-2999" || s.Operation != "op-2999" {
		t.Errorf("stats %q %q", s.FinishReason, s.Operation)
	}
}

// badCase is one entry of the bad-input catalogue for the Go API (the update
// log's is transport's): each gets a typed rejection and a count, and the
// valid request recorded around it is unaffected.
type badCase struct {
	name   string
	u      *Update
	reason Reason
}

func badCatalogue() []badCase {
	id := strings.Repeat("x", 10<<20)
	return []badCase{
		{name: "10 MB request id", u: &Update{RequestID: id, Kind: KindQueued, Time: time.Unix(1700000000, 0)}, reason: ReasonTooLong},
		{name: "10 MB scope", u: &Update{RequestID: "w", Kind: KindArrived, Time: time.Unix(1700000000, 0), Model: "m", Scope: id}, reason: ReasonTooLong},
		{name: "zero time", u: &Update{RequestID: "v", Kind: KindQueued}, reason: ReasonBadTimestamp},
		{name: "kind zero", u: &Update{RequestID: "v", Time: time.Unix(1700000000, 0)}, reason: ReasonUnknownKind},
		{name: "wrong side", u: &Update{RequestID: "v", Kind: KindDecoding, Side: SideFrontend, Time: time.Unix(1700000000, 1)}, reason: ReasonWrongSide},
		{name: "duplicate ARRIVED", u: &Update{RequestID: "v", Kind: KindArrived, Time: time.Unix(1700000000, 1), Model: "m"}, reason: ReasonDuplicateArrival},
		{name: "cached > computed", u: &Update{RequestID: "v", Kind: KindPrefilling, Time: time.Unix(1700000000, 2), NumComputedTokens: 2, NumCachedTokens: 3}, reason: ReasonCachedExceedsComputed},
		{name: "computed > prompt", u: &Update{RequestID: "v", Kind: KindPrefilling, Time: time.Unix(1700000000, 2), NumComputedTokens: 1000}, reason: ReasonComputedExceedsTokens},
		{name: "time backwards", u: &Update{RequestID: "v", Kind: KindDetokenized, Time: time.Unix(1699999999, 0), NumNewTokens: 1}, reason: ReasonTimeBackwards},
		{name: "bad transition", u: &Update{RequestID: "v", Kind: KindDecoding, Time: time.Unix(1700000000, 3)}, reason: ReasonBadTransition},
		{name: "ambiguous id", u: &Update{RequestID: "twin", Kind: KindQueued, Time: time.Unix(1700000000, 3)}, reason: ReasonAmbiguousRequest},
	}
}

func TestBadInputCatalogue(t *testing.T) {
	cat := badCatalogue()
	if len(cat) < 10 {
		t.Fatalf("catalogue has %d cases", len(cat))
	}
	h := newHarness(t)
	t0 := time.Unix(1700000000, 0)
	// The valid request "v", and two requests sharing the id "twin".
	h.must(Update{RequestID: "v", Kind: KindArrived, Time: t0, Model: "m"})
	h.must(Update{RequestID: "v", Kind: KindInputProcessed, Time: t0.Add(time.Millisecond), NumPromptTokens: 10})
	h.must(Update{RequestID: "v", Kind: KindQueued, Time: t0})
	h.must(Update{RequestID: "twin", Kind: KindArrived, Time: t0, Model: "a"})
	h.must(Update{RequestID: "twin", Kind: KindArrived, Time: t0, Model: "b"})
	for _, tc := range cat {
		t.Run(tc.name, func(t *testing.T) {
			before := h.counter(attributes.MetricRejectedUpdates, attributes.RejectionReason.String(string(tc.reason)))
			err := h.tr.Record(*tc.u)
			var re *RejectError
			if !errors.As(err, &re) || re.Reason != tc.reason || !errors.Is(err, ErrRejected) || !errors.Is(err, tc.reason) {
				t.Fatalf("err = %v, want a RejectError with reason %s", err, tc.reason)
			}
			if len(err.Error()) > 600 {
				t.Errorf("error message is %d bytes long", len(err.Error()))
			}
			after := h.counter(attributes.MetricRejectedUpdates, attributes.RejectionReason.String(string(tc.reason)))
			if after != before+1 {
				t.Fatalf("llm.rejected_updates{%s} %d → %d", tc.reason, before, after)
			}
		})
	}
	// The valid request, recorded around all of that, is intact.
	h.must(Update{RequestID: "v", Kind: KindPrefilling, Time: t0.Add(2 * time.Millisecond), NumComputedTokens: 10})
	h.must(Update{RequestID: "v", Kind: KindDecoding, Time: t0.Add(10 * time.Millisecond)})
	h.must(Update{RequestID: "v", Kind: KindDetokenized, Time: t0.Add(11 * time.Millisecond), NumNewTokens: 1})
	h.must(Update{RequestID: "v", Kind: KindFinished, Side: SideEngine, Time: t0.Add(20 * time.Millisecond), FinishReason: "stop"})
	h.must(Update{RequestID: "v", Kind: KindFinished, Time: t0.Add(21 * time.Millisecond), FinishReason: "stop"})
	s := h.statsOf("v")
	wantLatency(t, "ttft", s.FirstTokenLatency, 11)
	wantLatency(t, "e2e", s.E2ELatency, 21)
	wantLatency(t, "queue", s.QueueDuration, 2)
	if s.NumOutputTokens != 1 || s.NumPromptTokens.N != 10 {
		t.Fatalf("valid request damaged: %+v", s)
	}
}

// TestChurnHeap churns many requests, 10% of which are abandoned and ended by
// the TTL, and checks the live heap returns to where it started. It churns
// 1,000,000 requests without the race detector and 20,000 with it (the race
// detector makes each request ~10× slower); scripts/test.sh runs the full
// size without -race.
func TestChurnHeap(t *testing.T) {
	n := 1_000_000
	if raceEnabled || testing.Short() {
		n = 20_000
	}
	var spans countingProcessor
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(&spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	var abandoned, finished int
	tr, err := NewTracker(WithTracerProvider(tp), WithMeterProvider(mp), WithRequestTTL(10*time.Second),
		WithOnFinish(func(s *RequestStats) {
			finished++
			if s.FinishReason == FinishAbandoned {
				abandoned++
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	t0 := time.Unix(1700000000, 0)
	churn := func(from, to int) {
		ids := make([]string, 0, 64)
		for i := from; i < to; i++ {
			id := "req-" + strconv.Itoa(i)
			ids = append(ids, id)
			ts := t0.Add(time.Duration(i) * time.Millisecond)
			_ = tr.Record(Update{RequestID: id, Kind: KindArrived, Time: ts, Model: "m"})
			_ = tr.Step(&Step{Time: ts, Queued: ids[len(ids)-1:]})
			_ = tr.Step(&Step{Time: ts, Scheduled: []Scheduled{{RequestID: id, ComputedTokens: 100}}})
			_ = tr.Step(&Step{Time: ts, Decoded: []Decoded{{RequestID: id}}})
			if i%10 != 7 {
				_ = tr.Step(&Step{Time: ts, Finished: []Finished{{RequestID: id, Reason: "stop"}}})
			}
			if len(ids) == cap(ids) {
				ids = ids[:0]
			}
		}
	}
	// Warm up to the steady state: pools, caches, and the shard maps grown
	// to hold a TTL's worth of abandoned requests (10 s at 1,000 req/s).
	const warm = 20_000
	churn(0, warm)
	tr.Sweep(t0.Add(time.Hour))
	runtime.GC()
	runtime.GC()
	var m0 runtime.MemStats
	runtime.ReadMemStats(&m0)

	churn(warm, warm+n)
	// The abandoned tenth ends 10 s after its last update.
	tr.Sweep(t0.Add(time.Duration(warm+n)*time.Millisecond + time.Hour))
	runtime.GC()
	runtime.GC()
	var m1 runtime.MemStats
	runtime.ReadMemStats(&m1)

	if tr.InFlight() != 0 {
		t.Fatalf("%d requests still in flight", tr.InFlight())
	}
	if finished != warm+n {
		t.Fatalf("finished %d, want %d", finished, warm+n)
	}
	if want := (warm + n) / 10; abandoned != want {
		t.Fatalf("abandoned %d, want %d", abandoned, want)
	}
	growth := float64(m1.HeapAlloc)/float64(m0.HeapAlloc) - 1
	t.Logf("churned %d requests: live heap %d → %d bytes (%+.1f%%), %d spans", n, m0.HeapAlloc, m1.HeapAlloc, 100*growth, spans.n.Load())
	if growth > 0.10 {
		t.Fatalf("live heap grew %.1f%% over the churn, want ≤ 10%%", 100*growth)
	}
}

type countingProcessor struct {
	sdktrace.SpanProcessor
	n atomic.Int64
}

func (p *countingProcessor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (p *countingProcessor) OnEnd(sdktrace.ReadOnlySpan)                     { p.n.Add(1) }
func (p *countingProcessor) Shutdown(context.Context) error                  { return nil }
func (p *countingProcessor) ForceFlush(context.Context) error                { return nil }

// An id reused by a new request while the previous one with that id waits
// for its other side's FINISHED ends the wait instead of being rejected.
func TestIDReusedDuringTheWait(t *testing.T) {
	h := newHarness(t)
	h.must(Update{RequestID: "r", Kind: KindArrived, Time: at(0), Model: "m"})
	h.must(Update{RequestID: "r", Kind: KindInputProcessed, Time: at(1), NumPromptTokens: 3})
	h.must(Update{RequestID: "r", Kind: KindQueued, Time: at(2)})
	h.must(Update{RequestID: "r", Kind: KindPrefilling, Time: at(3), NumComputedTokens: 3})
	h.must(Update{RequestID: "r", Kind: KindDecoding, Time: at(10)})
	h.must(Update{RequestID: "r", Kind: KindFinished, Side: SideEngine, Time: at(11), FinishReason: "stop"})
	// The frontend never sends its FINISHED; the id comes back at once.
	h.must(Update{RequestID: "r", Kind: KindArrived, Time: at(12), Model: "m"})
	if len(h.stats) != 1 {
		t.Fatalf("%d finished, want the first request ended", len(h.stats))
	}
	wantLatency(t, "first request's e2e (to the engine's FINISHED)", h.stats[0].E2ELatency, 11)
	if h.tr.InFlight() != 1 {
		t.Fatalf("in flight %d, want the second request", h.tr.InFlight())
	}
	// While the first is still running, a second ARRIVED is a duplicate.
	err := h.tr.Record(Update{RequestID: "r", Kind: KindArrived, Time: at(13), Model: "m"})
	if !errors.Is(err, ReasonDuplicateArrival) {
		t.Fatalf("err = %v, want duplicate_arrival", err)
	}
}

// TestTimeMapping: the tracker's clock mapping (Tracker.UnixNano) gives a time without a
// monotonic reading its wall value, and one with a reading its monotonic
// distance from the tracker's anchor; far-off times stay out of the
// accepted range (no int64 wrap-around makes them valid).
func TestTimeMapping(t *testing.T) {
	tr, err := NewTracker()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr.Shutdown(context.Background()) }()
	now := time.Now()
	for _, tc := range []struct {
		name string
		in   time.Time
		want int64
	}{
		{"wall", time.Unix(1700000000, 123), 1700000000*1e9 + 123},
		{"wall, other zone", time.Unix(1700000000, 5).In(time.FixedZone("x", 3600)), 1700000000*1e9 + 5},
		{"monotonic", now.Add(time.Second), tr.anchorNs + int64(now.Add(time.Second).Sub(tr.anchor))},
		{"1970", time.Unix(1, 0), 1e9},
		{"2199", time.Date(2199, 12, 31, 0, 0, 0, 0, time.UTC), time.Date(2199, 12, 31, 0, 0, 0, 0, time.UTC).UnixNano()},
	} {
		if got := tr.UnixNano(tc.in); got != tc.want {
			t.Errorf("%s: UnixNano = %d, want %d", tc.name, got, tc.want)
		}
	}
	for _, far := range []time.Time{{}, time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(1500, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2500, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), time.Unix(1<<62, 0)} {
		if ns := tr.ns(far); validNs(ns) {
			t.Errorf("%v maps to the accepted %d", far, ns)
		}
	}
}

// TestStepForeignHandles: a Step naming a handle from another tracker, a
// rejected arrival's handle or a zero Request rejects that entry (counted,
// typed) and records nothing anywhere else.
func TestStepForeignHandles(t *testing.T) {
	h, other := newHarness(t), newHarness(t)
	foreign, err := other.tr.Arrive(context.Background(), "f", Arrival{Time: at(0), Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	rejected, err := h.tr.Arrive(context.Background(), "", Arrival{Time: at(0), Model: "m"})
	if err == nil {
		t.Fatal("empty id accepted")
	}
	for name, q := range map[string]*Request{"foreign": foreign, "rejected arrival": rejected, "zero": {}} {
		err := h.tr.Step(&Step{Time: at(1), QueuedReqs: []*Request{q}, Decoded: []Decoded{{Req: q}}})
		var re *RejectError
		if !errors.As(err, &re) || re.Reason != ReasonUnknownRequest {
			t.Errorf("%s: %v, want unknown_request", name, err)
		}
	}
	// The other tracker's request saw nothing: its next update is still
	// the first engine update.
	if err := other.tr.Step(&Step{Time: at(2), QueuedReqs: []*Request{foreign}}); err != nil {
		t.Errorf("the foreign request was touched: %v", err)
	}
}

// Client-supplied names that are not UTF-8 (a binary frame, a Go caller
// passing a client's bytes) become valid UTF-8 before they are attributes:
// OTLP strings are UTF-8, and one bad value among a metric export's
// attributes fails the whole export. Each repair is counted.
func TestClientStringsNotUTF8(t *testing.T) {
	h := newHarness(t)
	h.must(Update{RequestID: "u", Kind: KindArrived, Time: at(0), Model: "m\xff\xfe", Operation: "chat\xc0", LoRAAdapter: "a\x80"})
	h.must(Update{RequestID: "u", Kind: KindInputProcessed, Time: at(1), NumPromptTokens: 3,
		Sampling: &SamplingParams{Stop: []string{"\xe2\x82", "ok"}}})
	h.must(Update{RequestID: "u", Kind: KindFinished, Time: at(2), FinishReason: FinishError, ErrorType: "e\xff"})
	s := h.statsOf("u")
	for _, c := range []struct{ got, want string }{
		{s.Model, "m\uFFFD"}, {s.Operation, "chat\uFFFD"}, {s.LoRAAdapter, "a\uFFFD"}, {s.ErrorType, "e\uFFFD"},
	} {
		if c.got != c.want {
			t.Errorf("%q, want %q", c.got, c.want)
		}
	}
	root, _ := h.treeOf(s)
	for _, kv := range root.Attributes() {
		if kv.Key == attributes.RequestStopSequences {
			if got := kv.Value.AsStringSlice(); got[0] != "\uFFFD" || got[1] != "ok" {
				t.Errorf("stop sequences %q", got)
			}
		}
	}
	for name, m := range h.metrics() {
		for _, set := range attrSetsOf(m) {
			for _, kv := range set.ToSlice() {
				if kv.Value.Type() == attribute.STRING && !utf8.ValidString(kv.Value.AsString()) {
					t.Errorf("%s: attribute %s = %q", name, kv.Key, kv.Value.AsString())
				}
			}
		}
	}
	for _, key := range []attribute.Key{attributes.RequestModel, attributes.OperationName, attributes.LoRAAdapter,
		attributes.ErrorType, attributes.RequestStopSequences} {
		if got := h.counter(attributes.MetricAttributesTruncated, attributes.TruncatedKey.String(string(key))); got != 1 {
			t.Errorf("llm.attributes.truncated{%s} = %d, want 1", key, got)
		}
	}
}

// A request id, scope or kv_source that is not UTF-8 (a binary frame's
// bytes) stays the request's identity as given — two ids differing only in
// invalid bytes are two requests — and is cleaned where it becomes an
// attribute: one invalid string in a span fails the OTLP export of its
// whole batch, other requests' spans with it.
func TestClientIdentitiesNotUTF8(t *testing.T) {
	h := newHarness(t)
	for _, id := range []string{"u\xff", "u\xfe"} {
		us := decodeInstance(id, "")
		for i := range us {
			us[i].Scope = "s\xc0"
			if us[i].Kind == KindRemoteKVWait {
				us[i].KVSource = "p\xff"
			}
		}
		h.feed(us)
	}
	for _, id := range []string{"u\xff", "u\xfe"} {
		s := h.statsOf(id)
		if s.KVSource != "p\uFFFD" {
			t.Errorf("%q: kv_source %q", id, s.KVSource)
		}
		root, rest := h.treeOf(s)
		for _, sp := range append(rest, root) {
			for _, kv := range sp.Attributes() {
				if kv.Value.Type() == attribute.STRING && !utf8.ValidString(kv.Value.AsString()) {
					t.Errorf("%q %s: attribute %s = %q", id, sp.Name(), kv.Key, kv.Value.AsString())
				}
			}
		}
		if v, _ := attrOf(root.Attributes(), attributes.RequestID); v.AsString() != "u\uFFFD" {
			t.Errorf("%q: gen_ai.request.id %q", id, v.AsString())
		}
	}
	for _, key := range []attribute.Key{attributes.RequestID, attributes.RequestScope, attributes.KVTransferSource} {
		if got := h.counter(attributes.MetricAttributesTruncated, attributes.TruncatedKey.String(string(key))); got != 2 {
			t.Errorf("llm.attributes.truncated{%s} = %d, want 2", key, got)
		}
	}
}

// Issue 12.6: client-supplied strings that become attributes are cut at
// their caps and counted; the request is still traced whole.
func TestClientStringsCapped(t *testing.T) {
	h := newHarness(t)
	long := strings.Repeat("é", 3<<20) // 6 MiB of two-byte runes
	stops := []string{long}
	for i := range 20 {
		stops = append(stops, strconv.Itoa(i))
	}
	h.must(Update{RequestID: "c", Kind: KindArrived, Time: at(0), Model: long, Operation: long})
	h.must(Update{RequestID: "c", Kind: KindInputProcessed, Time: at(1), NumPromptTokens: 3,
		Sampling: &SamplingParams{Stop: stops}})
	h.must(Update{RequestID: "c", Kind: KindFinished, Time: at(2), FinishReason: long, ErrorType: long})
	s := h.statsOf("c")
	if len(s.Model) > MaxModelLength || len(s.Operation) > MaxNameLength || len(s.FinishReason) > MaxNameLength ||
		len(s.ErrorType) > MaxNameLength || !utf8.ValidString(s.Model) || !utf8.ValidString(s.FinishReason) {
		t.Fatalf("names not cut to valid UTF-8 at their caps: model %d, op %d, reason %d, error %d bytes",
			len(s.Model), len(s.Operation), len(s.FinishReason), len(s.ErrorType))
	}
	root, _ := h.treeOf(s)
	size := 0
	for _, kv := range root.Attributes() {
		size += len(kv.Value.String())
		if kv.Key == attributes.RequestStopSequences {
			got := kv.Value.AsStringSlice()
			if len(got) != MaxStopSequences || len(got[0]) > MaxStopLength || !utf8.ValidString(got[0]) {
				t.Errorf("stop sequences %d, first %d bytes", len(got), len(got[0]))
			}
		}
	}
	if size > 8<<10 {
		t.Errorf("the root's attributes hold %d bytes", size)
	}
	for key, want := range map[attribute.Key]int64{
		attributes.RequestModel: 1, attributes.OperationName: 1, attributes.FinishReasons: 1,
		attributes.ErrorType: 1, attributes.RequestStopSequences: 2,
	} {
		if got := h.counter(attributes.MetricAttributesTruncated, attributes.TruncatedKey.String(string(key))); got != want {
			t.Errorf("llm.attributes.truncated{%s} = %d, want %d", key, got, want)
		}
	}
}

// TestTokenSumsPast32Bits: every step's count is within its bound, the
// request's sum is not within 2^31; no span attribute, stat or counter may
// wrap negative. Both sides deliver, with a draft on every step.
func TestTokenSumsPast32Bits(t *testing.T) {
	const n, steps = 1 << 20, 2100
	const total = int64(n) * steps
	h := newHarness(t)
	h.must(Update{RequestID: "long", Kind: KindArrived, Time: at(0), Model: "m"})
	h.must(Update{RequestID: "long", Kind: KindInputProcessed, Time: at(0), NumPromptTokens: 10})
	h.must(Update{RequestID: "long", Kind: KindQueued, Time: at(1)})
	h.must(Update{RequestID: "long", Kind: KindPrefilling, Time: at(2), NumComputedTokens: 10})
	for i := range steps {
		h.must(Update{RequestID: "long", Kind: KindDecoding, Time: at(3 + float64(i)), NumNewTokens: n,
			NumDraftTokens: n, NumAcceptedTokens: n - 1})
		h.must(Update{RequestID: "long", Kind: KindDetokenized, Time: at(3.5 + float64(i)), NumNewTokens: n})
	}
	h.must(Update{RequestID: "long", Kind: KindFinished, Side: SideEngine, Time: at(3000), FinishReason: "length"})
	h.must(Update{RequestID: "long", Kind: KindFinished, Time: at(3001), FinishReason: "length"})
	s := h.statsOf("long")
	if int64(s.NumOutputTokens) != total || int64(s.NumDraftTokens) != total || int64(s.NumAcceptedTokens) != total-steps {
		t.Fatalf("output %d, draft %d, accepted %d; want %d, %d, %d",
			s.NumOutputTokens, s.NumDraftTokens, s.NumAcceptedTokens, total, total, total-steps)
	}
	want := map[attribute.Key]int64{
		attributes.UsageOutputTokens: total, attributes.DecodeOutputTokens: total,
		attributes.SpecDraftTokens: total, attributes.SpecAcceptedTokens: total - steps,
	}
	seen := 0
	for _, sp := range h.rec.Ended() {
		for _, kv := range sp.Attributes() {
			if w, ok := want[kv.Key]; ok {
				seen++
				if kv.Value.AsInt64() != w {
					t.Errorf("%s: %s = %d, want %d", sp.Name(), kv.Key, kv.Value.AsInt64(), w)
				}
			}
		}
	}
	if seen < len(want) {
		t.Errorf("saw %d of the %d attributes", seen, len(want))
	}
	h.wantCounter(attributes.MetricGenerationTokens, total)
	h.wantCounter(attributes.MetricSpecDraftTokens, total)
}

// A delivery's busy time is bounded (an hour): a broken frontend clock must
// not wrap the request's llm.detokenize.busy_time negative. Both the
// general path and Request.Detokenized's fast path reject it.
func TestDetokenizeBusyBounded(t *testing.T) {
	h := newHarness(t)
	h.feed([]Update{arrived("b", 0, "m", "chat"), inputProcessed("b", 1, 10)})
	err := h.tr.Record(detok("b", 10, 1, time.Duration(math.MaxInt64)))
	if !errors.Is(err, ReasonAbsurdCount) {
		t.Errorf("Record: %v, want absurd_count", err)
	}
	q, _ := h.tr.Arrive(context.Background(), "q", Arrival{Time: at(0), Model: "m"})
	if err := q.Detokenized(at(10), 1, maxBusy+1); !errors.Is(err, ReasonAbsurdCount) {
		t.Errorf("Detokenized: %v, want absurd_count", err)
	}
	h.must(detok("b", 11, 1, maxBusy))
	h.must(detok("b", 12, 1, time.Second))
	h.must(feFinished("b", 13, "stop"))
	root, kids := h.treeOf(h.statsOf("b"))
	var detokSpan sdktrace.ReadOnlySpan
	for _, k := range kids {
		if k.Name() == "llm.detokenize" {
			detokSpan = k
		}
	}
	if detokSpan == nil {
		t.Fatalf("no llm.detokenize under %s", root.Name())
	}
	if v, _ := attrOf(detokSpan.Attributes(), attributes.DetokenizeBusyTime); v.AsFloat64() != (maxBusy + time.Second).Seconds() {
		t.Errorf("busy_time %v, want %v", v.AsFloat64(), (maxBusy + time.Second).Seconds())
	}
}

// SPEC §8's per-position counter: positions 15 and up summed in 15, added
// at once (a step may accept 2^20 tokens) and never wrapping.
func TestSpecPositionsLarge(t *testing.T) {
	h := newHarness(t)
	h.feed([]Update{arrived("p", 0, "m", "chat"), inputProcessed("p", 1, 10), queued("p", 2), prefilling("p", 3, 10, 0)})
	const n, steps = maxNewTokensStep, 2100
	for i := range steps {
		h.must(specDecoding("p", 4+float64(i)*0.001, n, n, n))
	}
	h.must(enFinished("p", 10, "stop"))
	h.must(feFinished("p", 11, "stop"))
	for pos, want := range map[int]int64{0: steps, 14: steps, 15: steps * (n - 15)} {
		if got := h.counter(attributes.MetricSpecAcceptedPerPosition, attributes.SpecPosition.Int(pos)); got != want {
			t.Errorf("position %d: %d, want %d", pos, got, want)
		}
	}
}

// The finish-reason attribute cache keeps the first reasons it sees, not
// every one a client or engine invents.
func TestFinishReasonsCacheBounded(t *testing.T) {
	h := newHarness(t)
	for i := range 500 {
		id := fmt.Sprintf("r%d", i)
		h.must(arrived(id, float64(i), "m", "chat"))
		h.must(feFinished(id, float64(i)+0.5, fmt.Sprintf("reason-%d", i)))
	}
	n := 0
	finishReasons.Range(func(any, any) bool { n++; return true })
	if n > maxFinishReasons {
		t.Errorf("%d finish reasons cached, want at most %d", n, maxFinishReasons)
	}
	s := h.statsOf("r499")
	root, _ := h.treeOf(s)
	if v, _ := attrOf(root.Attributes(), attributes.FinishReasons); fmt.Sprint(v.AsStringSlice()) != "[reason-499]" {
		t.Errorf("finish_reasons %v", v.AsStringSlice())
	}
}

// A scheduler report no scheduler can make is rejected whole and counted:
// the gauges keep their last value, the prefix-cache counters stay
// monotonic. Through RecordSchedulerStats and Step.Stats alike.
func TestSchedulerStatsRejected(t *testing.T) {
	for _, c := range []struct {
		name string
		s    SchedulerStats
		want Reason
	}{
		{"negative running", SchedulerStats{Running: -5}, ReasonNegativeCount},
		{"negative waiting", SchedulerStats{Waiting: -1}, ReasonNegativeCount},
		{"negative queries", SchedulerStats{PrefixCacheQueries: -1000}, ReasonNegativeCount},
		{"hits over queries", SchedulerStats{PrefixCacheQueries: 10, PrefixCacheHits: 5000}, ReasonAbsurdCount},
		{"usage NaN", SchedulerStats{KVCacheUsage: math.NaN()}, ReasonAbsurdCount},
		{"usage +Inf", SchedulerStats{KVCacheUsage: math.Inf(1)}, ReasonAbsurdCount},
		{"usage a percentage", SchedulerStats{KVCacheUsage: 45}, ReasonAbsurdCount},
	} {
		for _, viaStep := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/step=%v", c.name, viaStep), func(t *testing.T) {
				h := newHarness(t)
				good := SchedulerStats{Running: 3, Waiting: 2, KVCacheUsage: 0.5, PrefixCacheQueries: 100, PrefixCacheHits: 10}
				if err := h.tr.RecordSchedulerStats(at(1), good); err != nil {
					t.Fatal(err)
				}
				var err error
				if viaStep {
					err = h.tr.Step(&Step{Time: at(2), Stats: &c.s})
				} else {
					err = h.tr.RecordSchedulerStats(at(2), c.s)
				}
				if !errors.Is(err, c.want) {
					t.Errorf("err %v, want %s", err, c.want)
				}
				if n := h.rejects(c.want); n != 1 {
					t.Errorf("%s counted %d times", c.want, n)
				}
				running, _ := h.gaugeInt(attributes.MetricRequestsRunning)
				usage, _ := h.gaugeFloat(attributes.MetricKVCacheUsage)
				q := h.counter(attributes.MetricPrefixCacheQuery)
				hits := h.counter(attributes.MetricPrefixCacheHits)
				if running != 3 || usage != 0.5 || q != 100 || hits != 10 {
					t.Errorf("running %d, usage %v, queries %d, hits %d; want 3, 0.5, 100, 10", running, usage, q, hits)
				}
			})
		}
	}
}

// A sweep scans a shard only once one of its requests may have expired
// (shard.due), so requests piling up without a FINISHED cost a sweep
// nothing until one could end: a replayed log of 40,000 open requests took
// minutes, and a collector holding 200,000 burned most of a core idle.
// due is a lower bound that a wait lowers and a scan recomputes.
func TestShardDue(t *testing.T) {
	h := newHarness(t, WithRequestTTL(time.Minute), WithFrontendGrace(2*time.Second))
	for i := range 100 {
		h.must(arrived(fmt.Sprintf("r%d", i), float64(i), "m", "chat"))
	}
	earliest := func() int64 {
		d := int64(math.MaxInt64)
		for i := range h.tr.shards {
			d = min(d, h.tr.shards[i].due.Load())
		}
		return d
	}
	if got, want := earliest(), h.tr.ns(at(0))+int64(time.Minute); got != want {
		t.Fatalf("due %d, want the first arrival's TTL %d", got, want)
	}
	h.tr.Sweep(at(30_000))
	if got, want := earliest(), h.tr.ns(at(0))+int64(time.Minute); got != want {
		t.Errorf("a sweep before it moved due to %d", got)
	}
	// r5's engine finishes with its frontend reporting: it waits 2 s.
	h.must(inputProcessed("r5", 30_001, 3))
	h.must(queued("r5", 30_002))
	h.must(prefilling("r5", 30_003, 3, 0))
	h.must(decoding("r5", 30_004, 1))
	h.must(enFinished("r5", 30_005, "stop"))
	if got, want := earliest(), h.tr.ns(at(30_005))+int64(2*time.Second); got > want {
		t.Errorf("due %d after a wait began, want at most %d", got, want)
	}
	h.tr.Sweep(at(32_005))
	if s := h.statsOf("r5"); s.FinishReason != "stop" {
		t.Errorf("r5 %q", s.FinishReason)
	}
	if got, want := earliest(), h.tr.ns(at(0))+int64(time.Minute); got != want {
		t.Errorf("due %d after the wait ended, want %d", got, want)
	}
	h.tr.Sweep(at(60_050)) // r0 … r50 idle for a minute
	if n := h.tr.InFlight(); n != 49 {
		t.Errorf("%d in flight, want 49", n)
	}
	if got, want := earliest(), h.tr.ns(at(51))+int64(time.Minute); got != want {
		t.Errorf("due %d, want r51's TTL %d", got, want)
	}
}
