package waterfall

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/otelstats"
	"github.com/llmtrace/llmtrace/spans"
)

// preemptedTrace records one request through the tracker's public API —
// chunked prefill, a preemption, a recompute — and returns its captured
// spans.
func preemptedTrace(t *testing.T) (*otelstats.RequestStats, []sdktrace.ReadOnlySpan, *Capture) {
	t.Helper()
	c := NewCapture(4)
	tp := sdktrace.NewTracerProvider(sdktrace.WithIDGenerator(spans.IDGenerator()), sdktrace.WithSpanProcessor(c))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	var got otelstats.RequestStats
	tr, err := otelstats.NewTracker(otelstats.WithTracerProvider(tp), otelstats.WithOnFinish(func(s *otelstats.RequestStats) { got = *s }))
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
	q, err := tr.Arrive(context.Background(), "r1", otelstats.Arrival{Time: at(0), Model: "m"})
	must(err)
	must(q.InputProcessed(at(2), 100, nil))
	step := func(ms int, s otelstats.Step) {
		s.Time = at(ms)
		must(tr.Step(&s))
	}
	step(3, otelstats.Step{Queued: []string{"r1"}})
	step(10, otelstats.Step{Scheduled: []otelstats.Scheduled{{RequestID: "r1", ComputedTokens: 64, CachedTokens: 32}}})
	step(20, otelstats.Step{Scheduled: []otelstats.Scheduled{{RequestID: "r1", ComputedTokens: 100, CachedTokens: 32}}})
	for i, ms := range []int{30, 40, 50} {
		step(ms, otelstats.Step{Decoded: []otelstats.Decoded{{RequestID: "r1"}}})
		must(q.Detokenized(at(ms+1), 1, 0))
		_ = i
	}
	step(55, otelstats.Step{Preempted: []string{"r1"}})
	step(80, otelstats.Step{Scheduled: []otelstats.Scheduled{{RequestID: "r1", ComputedTokens: 103, CachedTokens: 48}}})
	step(90, otelstats.Step{Decoded: []otelstats.Decoded{{RequestID: "r1"}}, Finished: []otelstats.Finished{{RequestID: "r1", Reason: "stop"}}})
	must(q.Detokenized(at(91), 1, 0))
	must(q.Finish(at(91), "stop"))
	must(tr.Shutdown(context.Background()))
	tid, err := trace.TraceIDFromHex(got.TraceID)
	must(err)
	return &got, c.Take(tid), c
}

func TestFromSpansAndText(t *testing.T) {
	st, sp, c := preemptedTrace(t)
	if c.Pending() != 0 {
		t.Errorf("%d traces still pending after Take", c.Pending())
	}
	w, err := FromSpans(sp)
	if err != nil {
		t.Fatal(err)
	}
	if w.RequestID != "r1" || w.TraceID != st.TraceID || w.Total != 91*time.Millisecond {
		t.Errorf("waterfall %s %s %v", w.RequestID, w.TraceID, w.Total)
	}
	want := []struct {
		label string
		phase Phase
		off   time.Duration
	}{
		{"chat m", PhaseRequest, 0},
		{"llm.input_processing", PhaseInput, 0},
		{"llm.handoff", PhaseHandoff, 2 * time.Millisecond},
		{"llm.queue (new)", PhaseQueue, 3 * time.Millisecond},
		{"llm.prefill (100 tok, 32 cached, 2 chunks)", PhasePrefill, 10 * time.Millisecond},
		{"llm.decode #0 (3 tok)", PhaseDecode, 31 * time.Millisecond},
		{"llm.queue (preempted)", PhasePreempted, 55 * time.Millisecond},
		{"llm.prefill (recompute, 103 tok, 48 cached)", PhaseRecompute, 80 * time.Millisecond},
		{"llm.decode #1 (1 tok)", PhaseDecode, 91 * time.Millisecond},
		{"llm.detokenize", PhaseDetokenize, 31 * time.Millisecond},
	}
	if len(w.Rows) != len(want) {
		for _, r := range w.Rows {
			t.Logf("row %+v", r)
		}
		t.Fatalf("%d rows, want %d", len(w.Rows), len(want))
	}
	for i, r := range w.Rows {
		if r.Label != want[i].label || r.Phase != want[i].phase || r.Offset != want[i].off {
			t.Errorf("row %d = %q %s +%v, want %q %s +%v", i, r.Label, r.Phase, r.Offset, want[i].label, want[i].phase, want[i].off)
		}
		if (i == 0) != (r.Depth == 0) {
			t.Errorf("row %d depth %d", i, r.Depth)
		}
	}
	if len(w.Rows[4].Marks) != 1 || w.Rows[4].Marks[0] != 20*time.Millisecond {
		t.Errorf("prefill chunk marks %v, want one at +20ms", w.Rows[4].Marks)
	}

	w.Title = "a preempted request"
	var b bytes.Buffer
	w.Text(&b, 40)
	out := b.String()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 1+len(want) || !strings.HasPrefix(lines[0], "a preempted request — r1, trace "+st.TraceID) {
		t.Fatalf("text:\n%s", out)
	}
	root := lines[1]
	if !strings.Contains(root, "|"+strings.Repeat("─", 40)+"|") || !strings.Contains(root, "91.0ms") {
		t.Errorf("root line %q should span the whole track", root)
	}
	if pre := lines[7]; !strings.Contains(pre, "+55.0ms") || !strings.Contains(pre, "25.0ms") || !strings.Contains(pre, "╳") {
		t.Errorf("preempted line %q", pre)
	}
	if dec := lines[9]; !strings.Contains(dec, "█|") {
		t.Errorf("the last decode segment %q should be drawn at the end of the track", dec)
	}
	for _, l := range lines[1:] {
		if n := len([]rune(l[strings.Index(l, "|"):])); n != 42 {
			t.Errorf("track of %q is %d wide, want 42", l, n)
		}
	}
}

func TestCaptureIsBounded(t *testing.T) {
	c := NewCapture(3)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(c))
	defer tp.Shutdown(context.Background())
	tracer := tp.Tracer("t")
	for range 10 {
		_, s := tracer.Start(context.Background(), "root")
		s.End()
	}
	if c.Pending() != 3 || c.Dropped() != 7 {
		t.Errorf("pending %d dropped %d, want 3 and 7", c.Pending(), c.Dropped())
	}
}

func TestDur(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0µs", 450 * time.Microsecond: "450µs", 12345 * time.Microsecond: "12.3ms", 2500 * time.Millisecond: "2.500s", -time.Millisecond: "-1.0ms",
	} {
		if got := Dur(d); got != want {
			t.Errorf("Dur(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestTickLabel(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0", time.Second: "1s", 2500 * time.Millisecond: "2.5s", 200 * time.Millisecond: "200ms", 20 * time.Millisecond: "20ms", 500 * time.Microsecond: "500µs",
	} {
		if got := tickLabel(d); got != want {
			t.Errorf("tickLabel(%v) = %q, want %q", d, got, want)
		}
	}
}
