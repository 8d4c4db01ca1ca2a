package openaihttp

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/llmtrace/llmtrace/otelstats"
)

// laterExchange is a streamed request that arrived a minute ago (the
// writes' times are set after it), on the default limits, in a tracker of
// its own with opts.
func laterExchange(t *testing.T, opts ...otelstats.Option) (*exchange, *config) {
	t.Helper()
	tr, err := otelstats.NewTracker(append([]otelstats.Option{otelstats.WithTracerProvider(tracenoop.NewTracerProvider()),
		otelstats.WithMeterProvider(metricnoop.NewMeterProvider())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := newConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	arrived := time.Now().Add(-time.Minute)
	q, err := tr.Arrive(context.Background(), "r1", otelstats.Arrival{Time: arrived, Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	ex := newExchange(cfg, "chat", arrived)
	ex.begin(q, requestInfo{Stream: true}, arrived, false, false)
	ex.header(http.StatusOK, http.Header{"Content-Type": {"text/event-stream"}}, arrived)
	return ex, cfg
}

// laterWrite is a write of a stream and when it returned, after arrival.
type laterWrite struct {
	at time.Duration
	p  string
}

func contentEvent(text string) string {
	return `data: {"id":"c1","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"` +
		text + `"},"finish_reason":null}]}` + "\n\n"
}

const stopEvent = `data: {"id":"c1","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` +
	"\n\ndata: [DONE]\n\n"

// Writes set aside are read as if read when they were written: every
// content event at its own write's time, in order, however the stream is
// cut and whatever is read at once (a write past the buffer) or early (a
// batch older than laterDelay, more writes than segments).
func TestLaterWritesKeepTimes(t *testing.T) {
	ms := time.Millisecond
	var many []laterWrite
	for i := range 3 * laterSegs {
		// Events in halves: the segments run out before the bytes do.
		e := contentEvent("t" + strconv.Itoa(i))
		at := time.Duration(i+1) * ms
		many = append(many, laterWrite{at, e[:len(e)/2]}, laterWrite{at, e[len(e)/2:]})
	}
	ev := contentEvent("a")
	cases := []struct {
		name   string
		writes []laterWrite
	}{
		{"one write each", []laterWrite{{10 * ms, contentEvent("a")}, {20 * ms, contentEvent("b")}, {35 * ms, contentEvent("c")}}},
		{"events cut across writes", []laterWrite{{10 * ms, ev[:7]}, {12 * ms, ev[7:] + ev[:30]}, {20 * ms, ev[30:]}, {31 * ms, ev}}},
		{"a write past the buffer between small ones", []laterWrite{{10 * ms, ev},
			{20 * ms, contentEvent(strings.Repeat("x", laterCap))}, {25 * ms, ev}}},
		{"gaps past the delay", []laterWrite{{10 * ms, ev}, {10*ms + laterDelay + ms, ev}, {10*ms + 3*laterDelay, ev}}},
		{"more writes than segments", many},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got *otelstats.RequestStats
			ex, cfg := laterExchange(t, otelstats.WithTokenLatencies(true),
				otelstats.WithOnFinish(func(s *otelstats.RequestStats) { c := *s; got = &c }))
			arrived := ex.arrived
			var want []time.Duration // content events' times
			var text strings.Builder
			last := time.Duration(0)
			for _, w := range tc.writes {
				// A content event is delivered by the write that ends it.
				text.WriteString(w.p)
				for strings.Count(text.String(), "\n\n") > 0 {
					e, rest, _ := strings.Cut(text.String(), "\n\n")
					if strings.Contains(e, `"content"`) {
						want = append(want, w.at)
					}
					text.Reset()
					text.WriteString(rest)
				}
				ex.wrote(arrived.Add(w.at), arrived.Add(w.at), []byte(w.p), nil)
				last = w.at
			}
			end := last + ms
			ex.wrote(arrived.Add(end), arrived.Add(end), []byte(stopEvent), nil)
			ex.finish(outcome{end: arrived.Add(end + ms)}, nil)
			if got == nil {
				t.Fatal("no stats")
			}
			if got.NumOutputTokens != len(want) || got.FinishReason != "stop" {
				t.Fatalf("%d tokens, finish %q; want %d, stop", got.NumOutputTokens, got.FinishReason, len(want))
			}
			var gaps []time.Duration
			for i := 1; i < len(want); i++ {
				gaps = append(gaps, want[i]-want[i-1])
			}
			if !slices.Equal(got.OutputTokenLatencies, gaps) {
				t.Errorf("token gaps %v, want %v", got.OutputTokenLatencies, gaps)
			}
			if got.FirstTokenLatency.Value != want[0] {
				t.Errorf("TTFT %v, want %v", got.FirstTokenLatency.Value, want[0])
			}
			if n := cfg.budget.used.Load(); n != 0 {
				t.Errorf("%d bytes still held", n)
			}
		})
	}
}

// A batch is read once its first write is laterDelay old, at the next
// write: the tracker sees a paused stream's tokens when it goes on.
func TestLaterWritesReadAfterDelay(t *testing.T) {
	ex, _ := laterExchange(t)
	arrived := ex.arrived
	ex.wrote(arrived, arrived.Add(time.Millisecond), []byte(contentEvent("a")), nil)
	ex.wrote(arrived, arrived.Add(2*time.Millisecond), []byte(contentEvent("b")), nil)
	if ex.chunks != 0 || ex.later.k != 2 {
		t.Fatalf("read %d chunks, %d set aside: want both set aside", ex.chunks, ex.later.k)
	}
	ex.wrote(arrived, arrived.Add(laterDelay+2*time.Millisecond), []byte(contentEvent("c")), nil)
	if ex.chunks != 2 || ex.later.k != 1 {
		t.Fatalf("read %d chunks, %d set aside: want 2 read, 1 set aside", ex.chunks, ex.later.k)
	}
	if err := ex.handlerInput(arrived, 3); err != ErrTooLate || ex.chunks != 3 {
		t.Errorf("input after content: %v with %d chunks read; want ErrTooLate, 3", err, ex.chunks)
	}
	ex.finish(outcome{end: arrived.Add(time.Second)}, nil)
}

// The buffer comes only from the budget's first half, and a refusal is not
// counted: nothing was given up.
func TestLaterWritesBudget(t *testing.T) {
	refused := 0
	b := newBudget(2*laterCap-1, func() { refused++ })
	h := &hold{b: b}
	var l laterWrites
	if l.ready(h) || refused != 0 {
		t.Fatalf("took %d of a budget of %d (refusals %d)", laterCap, b.limit, refused)
	}
	b.limit = 2 * laterCap
	if !l.ready(h) || b.used.Load() != laterCap {
		t.Fatalf("refused half the budget (used %d)", b.used.Load())
	}
	l.release(h)
	if b.used.Load() != 0 || l.buf != nil {
		t.Errorf("used %d after release", b.used.Load())
	}
}
