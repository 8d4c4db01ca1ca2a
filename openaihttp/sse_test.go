package openaihttp

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/llmtrace/llmtrace/otelstats"
)

type sseEvent struct {
	data string
	over bool
}

type eventList []sseEvent

func (l *eventList) event(data []byte, over bool) {
	*l = append(*l, sseEvent{string(data), over})
}

// referenceSSE is the SSE specification's algorithm, written plainly: split
// into lines at CRLF, LF or CR; a blank line dispatches; "data" lines join
// with LF. Events longer than limit are over.
func referenceSSE(stream string, limit int) []sseEvent {
	var out []sseEvent
	var data []string
	has, over := false, false
	stream = strings.TrimPrefix(stream, "\ufeff") // the decoder strips one leading BOM
	lines := strings.Split(strings.NewReplacer("\r\n", "\n", "\r", "\n").Replace(stream), "\n")
	for i, line := range lines {
		if i == len(lines)-1 {
			break // no line end: not a line yet
		}
		switch {
		case line == "":
			if has {
				d := strings.Join(data, "\n")
				if over || len(d) > limit {
					out = append(out, sseEvent{"", true})
				} else {
					out = append(out, sseEvent{d, false})
				}
			}
			data, has, over = nil, false, false
		case len(line) > limit:
			has, over = true, true
		case line[0] == ':':
		default:
			field, value, _ := strings.Cut(line, ":")
			if field == "data" {
				data = append(data, strings.TrimPrefix(value, " "))
				has = true
			}
		}
	}
	return out
}

func TestSSEReader(t *testing.T) {
	for _, c := range []struct {
		name, stream string
		want         []sseEvent
	}{
		{"LF", "data: a\n\ndata: b\n\n", []sseEvent{{"a", false}, {"b", false}}},
		{"CRLF", "data: a\r\n\r\n", []sseEvent{{"a", false}}},
		{"CR", "data: a\r\rdata: b\r\r", []sseEvent{{"a", false}, {"b", false}}},
		{"multi-line", "data: a\ndata:b\n\n", []sseEvent{{"a\nb", false}}},
		{"comments and fields", ": keep-alive\nevent: x\nid: 1\nretry: 5\ndata: a\n\n", []sseEvent{{"a", false}}},
		{"empty data", "data\n\n", []sseEvent{{"", false}}},
		{"no data", "event: x\n\n", nil},
		{"no blank line yet", "data: a\n", nil},
		{"over", "data: " + strings.Repeat("x", 40) + "\n\ndata: ok\n\n", []sseEvent{{"", true}, {"ok", false}}},
		{"byte order mark", "\ufeffdata: a\n\n", []sseEvent{{"a", false}}},
		{"two byte order marks", "\ufeff\ufeffdata: a\n\ndata: b\n\n", []sseEvent{{"b", false}}},
		{"a BOM's head", "\xef\xbbdata: a\n\ndata: b\n\n", []sseEvent{{"b", false}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got eventList
			r := sseReader{limit: 32}
			r.feed([]byte(c.stream), &got)
			if !reflect.DeepEqual([]sseEvent(got), c.want) {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
			if ref := referenceSSE(c.stream, 32); !reflect.DeepEqual(ref, c.want) {
				t.Errorf("the reference says %+v", ref)
			}
		})
	}
}

// FuzzSSEReader: however a stream is cut into writes, the reader finds the
// events the specification's algorithm finds, in place or assembled.
func FuzzSSEReader(f *testing.F) {
	for _, s := range []string{
		"data: {\"choices\":[]}\n\ndata: [DONE]\n\n",
		"data: a\r\n\r\n: keep-alive\r\n\r\ndata: b\r\r",
		"data: x\ndata: y\n\nevent: e\ndata: z\n\n",
		"data:" + strings.Repeat("x", 70) + "\n\ndata: y\n\n",
		"\r\r\n\n\rdata: x\r",
		"data\n\ndata:\n\n",
		"\ufeffdata: a\n\n",
		"\xef\xbbdata: a\n\n",
	} {
		f.Add(s, uint64(0x9e3779b97f4a7c15))
	}
	f.Fuzz(func(t *testing.T, stream string, splits uint64) {
		const limit = 64
		want := referenceSSE(stream, limit)
		var got eventList
		r := sseReader{limit: limit}
		rest := []byte(stream)
		for s := splits | 1; len(rest) > 0; s = s*6364136223846793005 + 1442695040888963407 {
			k := min(len(rest), int(s>>59)+1)
			buf := append([]byte(nil), rest[:k]...)
			r.feed(buf, &got)
			clear(buf) // the reader must not keep the caller's bytes
			rest = rest[k:]
		}
		if len(want) == 0 && len(got) == 0 {
			return
		}
		if !reflect.DeepEqual([]sseEvent(got), want) {
			t.Fatalf("split %+v\nreference %+v", got, want)
		}
	})
}

func newTestExchange(t testing.TB, tr *otelstats.Tracker, n int, expectUsage bool) *exchange {
	cfg, err := newConfig([]Option{WithEventLimit(1 << 10), WithMeterProvider(metricnoop.NewMeterProvider()), WithTracerProvider(tracenoop.NewTracerProvider())})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	q, err := tr.Arrive(context.Background(), fmt.Sprint("r", n), otelstats.Arrival{Time: now, Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	ex := newExchange(cfg, "chat", now)
	ex.begin(q, requestInfo{Model: "m", Stream: true, IncludeUsage: expectUsage}, now, false, false)
	h := http.Header{}
	h.Set("Content-Type", "text/event-stream")
	ex.header(200, h, now)
	return ex
}

type exchangeSummary struct {
	events, chunks     int
	obs                observed
	pendingPlusRecords int64
}

func summarize(ex *exchange) exchangeSummary {
	ex.readLater() // what waits is read as it would have been
	n := ex.recorded
	for _, d := range ex.pending {
		n += int64(d.w)
	}
	return exchangeSummary{ex.events, ex.chunks, ex.obs, n}
}

// FuzzExchangeStream: however a response's bytes are split into writes,
// the layer reads the same events, content and usage from them, and never
// panics.
func FuzzExchangeStream(f *testing.F) {
	chunk := func(delta, fr string) string {
		return `data: {"choices":[{"index":0,"delta":` + delta + `,"finish_reason":` + fr + `}]}` + "\n\n"
	}
	for _, s := range []string{
		chunk(`{"role":"assistant","content":""}`, "null") + chunk(`{"content":"a"}`, "null") + chunk(`{}`, `"stop"`) +
			`data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}` + "\n\ndata: [DONE]\n\n",
		"data: {\"choices\":[{\"text\":\"x\"}]}\r\n\r\n: keep-alive\r\n\r\ndata: [DONE]\r\n\r\n",
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"x\"}\n\n",
		"data: {\"choices\":\ndata: [{\"delta\":{\"content\":\"multi-line\"}}]}\n\n",
		"data: {\"error\":{\"message\":\"x\"}}\n\n",
		"data:" + strings.Repeat("x", 2000) + "\n\ndata: {\"choices\":[{\"text\":\"y\"}]}\n\n",
		"\r\r\n\n\rdata: x\r",
		`data: {"id":"a\u00e9","model":"` + strings.Repeat("m", 300) + `","choices":[{"delta":{"content":"x"},"finish_reason":"length"},{"delta":{"tool_calls":[{}]}}]}` + "\n\n",
	} {
		f.Add([]byte(s), uint64(0x9e3779b97f4a7c15))
	}
	tr, err := otelstats.NewTracker(otelstats.WithTracerProvider(tracenoop.NewTracerProvider()), otelstats.WithMeterProvider(metricnoop.NewMeterProvider()))
	if err != nil {
		f.Fatal(err)
	}
	n := 0
	f.Fuzz(func(t *testing.T, stream []byte, splits uint64) {
		n++
		whole := newTestExchange(t, tr, 2*n, splits&1 == 0)
		now := time.Now()
		whole.wrote(now, now, stream, nil)
		parts := newTestExchange(t, tr, 2*n+1, splits&1 == 0)
		rest := stream
		for s := splits; len(rest) > 0; s = s*6364136223846793005 + 1442695040888963407 {
			k := min(len(rest), int(s>>59)+1)
			parts.wrote(now, now, append([]byte(nil), rest[:k]...), nil)
			rest = rest[k:]
		}
		if a, b := summarize(whole), summarize(parts); a != b {
			t.Fatalf("one write: %+v\n  split: %+v", a, b)
		}
		for _, ex := range []*exchange{whole, parts} {
			u := ex.finish(outcome{end: time.Now()}, nil)
			if u.FinishReason == "" || len(ex.obs.model) > otelstats.MaxModelLength || len(ex.obs.respID) > maxResponseID {
				t.Fatalf("finished %+v, model %d bytes, id %d", u, len(ex.obs.model), len(ex.obs.respID))
			}
		}
	})
}
