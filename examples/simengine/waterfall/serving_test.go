package waterfall

import (
	"bytes"
	"context"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/otelstats"
	"github.com/llmtrace/llmtrace/spans"
)

// pdTrace records a router's request and its decode instance's share (a KV
// transfer, an encoder run, a speculative step) through the public API, two
// trackers on one TracerProvider, and returns the trace's spans.
func pdTrace(t *testing.T) []sdktrace.ReadOnlySpan {
	t.Helper()
	c := NewCapture(4)
	tp := sdktrace.NewTracerProvider(sdktrace.WithIDGenerator(spans.IDGenerator()), sdktrace.WithSpanProcessor(c))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	var routerTrace string
	router, err := otelstats.NewTracker(otelstats.WithTracerProvider(tp), otelstats.WithOnFinish(func(s *otelstats.RequestStats) { routerTrace = s.TraceID }))
	if err != nil {
		t.Fatal(err)
	}
	dec, err := otelstats.NewTracker(otelstats.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	rq, err := router.Arrive(context.Background(), "r", otelstats.Arrival{Time: at(0), Model: "m"})
	must(err)
	dq, err := dec.Arrive(rq.Context(context.Background()), "r", otelstats.Arrival{Time: at(20), Model: "m", PDRole: otelstats.PDRoleDecode})
	must(err)
	must(dq.InputProcessed(at(21), 100, nil))
	engine := func(u otelstats.Update) {
		u.Side = otelstats.SideEngine
		must(dq.Record(u))
	}
	must(dec.Step(&otelstats.Step{Time: at(22), QueuedReqs: []*otelstats.Request{dq}}))
	engine(otelstats.Update{Kind: otelstats.KindRemoteKVWait, Time: at(23), KVSource: "prefill-0", NumRemoteTokens: 99})
	engine(otelstats.Update{Kind: otelstats.KindRemoteKVReady, Time: at(33), NumRemoteTokens: 99, KVBytes: 99 << 17})
	engine(otelstats.Update{Kind: otelstats.KindEncoding, Time: at(34), NumItems: 1, NumEncoderTokens: 576})
	engine(otelstats.Update{Kind: otelstats.KindEncoded, Time: at(35), EncoderCacheHit: true})
	must(dec.Step(&otelstats.Step{Time: at(36), Scheduled: []otelstats.Scheduled{{Req: dq, ComputedTokens: 100}}}))
	must(dec.Step(&otelstats.Step{Time: at(40), Decoded: []otelstats.Decoded{{Req: dq, NewTokens: 1}}}))
	must(dq.Detokenized(at(41), 1, 0))
	must(dec.Step(&otelstats.Step{Time: at(50), SpecDecoded: []otelstats.SpecDecoded{{Req: dq, NewTokens: 3, DraftTokens: 4, AcceptedTokens: 2}},
		Finished: []otelstats.Finished{{Req: dq, Reason: "stop"}}}))
	must(dq.Detokenized(at(51), 3, 0))
	must(dq.Finish(at(51), "stop"))
	must(rq.RoutedPD(at(1), at(19), at(19)))
	must(rq.Detokenized(at(42), 1, 0))
	must(rq.Detokenized(at(52), 3, 0))
	must(rq.Finish(at(52), "stop"))
	must(dec.Shutdown(context.Background()))
	must(router.Shutdown(context.Background()))
	tid, err := trace.TraceIDFromHex(routerTrace)
	must(err)
	return c.Take(tid)
}

// A P/D trace nests the decode instance's tree under the router's root,
// depth first, with the new phases and their labels.
func TestFromSpansPD(t *testing.T) {
	w, err := FromSpans(pdTrace(t))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		label string
		phase Phase
		depth int
	}{
		{"chat m [router]", PhaseRequest, 0},
		{"chat m [decode]", PhaseRequest, 1},
		{"llm.input_processing", PhaseInput, 2},
		{"llm.handoff", PhaseHandoff, 2},
		{"llm.queue (new)", PhaseQueue, 2},
		{"llm.kv_transfer (99 tok, 13.0 MB, from prefill-0)", PhaseKVTransfer, 2},
		{"llm.queue (kv_ready)", PhaseQueue, 2},
		{"llm.encode (1 item(s), 576 tok, cache hit)", PhaseEncode, 2},
		{"llm.prefill (100 tok, 99 remote)", PhasePrefill, 2},
		{"llm.decode #0 (4 tok, 2/4 draft accepted)", PhaseDecode, 2},
		{"llm.detokenize", PhaseDetokenize, 2},
		{"llm.detokenize", PhaseDetokenize, 1},
	}
	if len(w.Rows) != len(want) {
		for _, r := range w.Rows {
			t.Logf("row %+v", r)
		}
		t.Fatalf("%d rows, want %d", len(w.Rows), len(want))
	}
	for i, r := range w.Rows {
		if r.Label != want[i].label || r.Phase != want[i].phase || r.Depth != want[i].depth {
			t.Errorf("row %d = %q %s depth %d, want %q %s depth %d", i, r.Label, r.Phase, r.Depth, want[i].label, want[i].phase, want[i].depth)
		}
	}
	var b bytes.Buffer
	w.Text(&b, 50)
	if out := b.String(); !strings.Contains(out, "≈") || !strings.Contains(out, "◆") {
		t.Errorf("the terminal waterfall lacks the transfer or encode glyph:\n%s", out)
	}
}

// The percentile labels never overlap, whatever the distribution: p50,
// p90 and p99 at nearly the same place (ITLs) stack in rows.
func TestHistogramLabelsDoNotOverlap(t *testing.T) {
	for name, xs := range map[string][]float64{
		"itl-like":  append(repeat(0.0098, 900), append(repeat(0.0103, 90), repeat(0.1036, 10)...)...),
		"one value": repeat(0.5, 10),
		"spread":    spread(1000, 0.01, 10),
		"tail":      append(repeat(0.2, 980), spread(20, 4.5, 5)...),
	} {
		h := histogram(name, "requests", ColorTTFT, xs)
		if len(h.Lines) != 3 {
			t.Fatalf("%s: %d percentile lines", name, len(h.Lines))
		}
		type box struct{ x0, x1, y float64 }
		var boxes []box
		for _, l := range h.Lines {
			w := float64(len([]rune(l.Label))) * axisCharW
			b := box{l.X, l.X + w, l.LabelY}
			if l.Anchor == "end" {
				b.x0, b.x1 = l.X-w, l.X
			}
			if b.x1 > float64(h.Width) || b.x0 < 0 {
				t.Errorf("%s: label %q at [%.0f, %.0f] leaves the chart", name, l.Label, b.x0, b.x1)
			}
			if l.LabelY >= float64(h.Top) {
				t.Errorf("%s: label %q at y %.0f is inside the plot (top %d)", name, l.Label, l.LabelY, h.Top)
			}
			for _, o := range boxes {
				if o.y == b.y && b.x0 < o.x1 && b.x1 > o.x0 {
					t.Errorf("%s: label %q overlaps another on row y=%.0f", name, l.Label, b.y)
				}
			}
			boxes = append(boxes, b)
		}
		// The y axis is labelled beyond its maximum: at least 1 and max.
		if len(h.YTicks) < 2 || h.YTicks[0].Label != "1" || h.YTicks[len(h.YTicks)-1].Label != strconv.Itoa(h.YMax) {
			t.Errorf("%s: y ticks %v (max %d)", name, h.YTicks, h.YMax)
		}
		for i := 1; i < len(h.YTicks); i++ {
			if gap := h.YTicks[i-1].Y - h.YTicks[i].Y; gap < 12 {
				t.Errorf("%s: y tick labels %s and %s are %.1f px apart", name, h.YTicks[i-1].Label, h.YTicks[i].Label, gap)
			}
		}
	}
}

func repeat(v float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func spread(n int, lo, hi float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = lo * math.Pow(hi/lo, float64(i)/float64(n))
	}
	return out
}

func TestCountTicks(t *testing.T) {
	for max, want := range map[int]string{
		1: "1", 3: "1 2 3", 7: "1 2 5 7", 27: "1 2 5 10 27", 75069: "1 10 100 1000 10000 75069", 1000: "1 10 100 1000",
	} {
		var got []string
		for _, c := range countTicks(max) {
			got = append(got, strconv.Itoa(c))
		}
		if strings.Join(got, " ") != want {
			t.Errorf("countTicks(%d) = %v, want %s", max, got, want)
		}
	}
}

// The load chart: one point per slice on each polyline, the KV axis in
// percent, preemption ticks where they happened, inside the plot.
func TestLoadChart(t *testing.T) {
	l := Load{Name: "engine", Start: time.Unix(0, 0), Step: time.Second}
	for i := range 300 {
		l.Running = append(l.Running, i%40)
		l.Waiting = append(l.Waiting, (i*7)%25)
		l.KVCacheUsage = append(l.KVCacheUsage, float64(i%100)/99)
		p := 0
		if i%50 == 49 {
			p = 2
		}
		l.Preemptions = append(l.Preemptions, p)
	}
	c := loadChart(l)
	pts := regexp.MustCompile(`[0-9.]+,[0-9.]+`)
	for name, line := range map[string]string{"running": c.Running, "waiting": c.Waiting, "kv": c.KV} {
		got := pts.FindAllString(line, -1)
		if len(got) != 300 {
			t.Errorf("%s: %d points, want 300", name, len(got))
		}
		for _, p := range got {
			x, _ := strconv.ParseFloat(p[:strings.Index(p, ",")], 64)
			y, _ := strconv.ParseFloat(p[strings.Index(p, ",")+1:], 64)
			if x < float64(c.PadL) || x > float64(c.Right) || y < float64(c.Top)-0.01 || y > float64(c.Base)+0.01 {
				t.Fatalf("%s: point %s outside the plot", name, p)
			}
		}
	}
	if len(c.Preempts) != 6 || c.TotalPreempt != 12 || c.PeakRunning != 39 || c.PeakWaiting != 24 || c.PeakKV != 1 {
		t.Errorf("%d preemption ticks (%d), peaks %d %d %v", len(c.Preempts), c.TotalPreempt, c.PeakRunning, c.PeakWaiting, c.PeakKV)
	}
	if c.KVTicks[len(c.KVTicks)-1].Label != "100%" || c.YTicks[0].Label != "0" || len(c.YTicks) < 3 {
		t.Errorf("axes: kv %v, requests %v", c.KVTicks, c.YTicks)
	}
	if c.Ticks[len(c.Ticks)-1].Label != "0:05:00" {
		t.Errorf("time axis ends at %q, want 0:05:00", c.Ticks[len(c.Ticks)-1].Label)
	}
	var b bytes.Buffer
	if err := WriteHTML(&b, &Page{Title: "t", Load: []Load{l}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `data-series="running"`) {
		t.Error("the page has no running series")
	}
}
