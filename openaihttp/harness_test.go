package openaihttp_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/llmtrace/llmtrace/openaihttp"
	"github.com/llmtrace/llmtrace/otelstats"
	"github.com/llmtrace/llmtrace/spans"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// h records what one tracker emits.
type h struct {
	t      *testing.T
	tp     *sdktrace.TracerProvider
	mp     *sdkmetric.MeterProvider
	rec    *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	tr     *otelstats.Tracker

	mu       sync.Mutex
	stats    []otelstats.RequestStats
	finished chan struct{}
}

func newH(t *testing.T, opts ...otelstats.Option) *h {
	t.Helper()
	x := &h{t: t, rec: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader(), finished: make(chan struct{}, 64)}
	x.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(x.rec), sdktrace.WithIDGenerator(spans.IDGenerator()))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(x.reader))
	x.mp = mp
	tr, err := otelstats.NewTracker(append([]otelstats.Option{
		otelstats.WithTracerProvider(x.tp), otelstats.WithMeterProvider(mp), otelstats.WithTokenLatencies(true),
		otelstats.WithOnFinish(func(s *otelstats.RequestStats) {
			x.mu.Lock()
			x.stats = append(x.stats, *s)
			x.mu.Unlock()
			x.finished <- struct{}{}
		}),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	x.tr = tr
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	return x
}

// handler is openaihttp.NewHandler recording into x's providers.
func (x *h) handler(next http.Handler, t *otelstats.Tracker, opts ...openaihttp.Option) http.Handler {
	return openaihttp.NewHandler(next, t, append([]openaihttp.Option{openaihttp.WithTracerProvider(x.tp), openaihttp.WithMeterProvider(x.mp)}, opts...)...)
}

// wait waits for n finished requests.
func (x *h) wait(n int) []otelstats.RequestStats {
	x.t.Helper()
	for range n {
		select {
		case <-x.finished:
		case <-time.After(5 * time.Second):
			x.t.Fatalf("timed out waiting for %d finished requests", n)
		}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	return slices.Clone(x.stats)
}

func (x *h) only() otelstats.RequestStats {
	x.t.Helper()
	s := x.wait(1)
	if len(s) != 1 {
		x.t.Fatalf("%d finished requests, want 1", len(s))
	}
	return s[0]
}

func (x *h) none() {
	x.t.Helper()
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.stats) != 0 || len(x.rec.Ended()) != 0 {
		x.t.Errorf("traced %d requests, %d spans; want none", len(x.stats), len(x.rec.Ended()))
	}
}

func (x *h) spanNames() []string {
	var out []string
	for _, s := range x.rec.Ended() {
		out = append(out, s.Name())
	}
	slices.Sort(out)
	return out
}

func (x *h) span(name string) sdktrace.ReadOnlySpan {
	x.t.Helper()
	for _, s := range x.rec.Ended() {
		if s.Name() == name {
			return s
		}
	}
	x.t.Fatalf("no span %q among %v", name, x.spanNames())
	return nil
}

func (x *h) hasSpan(name string) bool {
	for _, s := range x.rec.Ended() {
		if s.Name() == name {
			return true
		}
	}
	return false
}

func (x *h) metrics() map[string]metricdata.Aggregation {
	var rm metricdata.ResourceMetrics
	if err := x.reader.Collect(context.Background(), &rm); err != nil {
		x.t.Fatal(err)
	}
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

func (x *h) counter(name string, match ...attribute.KeyValue) int64 {
	d, ok := x.metrics()[name]
	if !ok {
		return 0
	}
	var n int64
	for _, p := range d.(metricdata.Sum[int64]).DataPoints {
		all := true
		for _, kv := range match {
			if v, has := p.Attributes.Value(kv.Key); !has || v != kv.Value {
				all = false
			}
		}
		if all {
			n += p.Value
		}
	}
	return n
}

func (x *h) histCount(name string) uint64 {
	d, ok := x.metrics()[name]
	if !ok {
		return 0
	}
	var n uint64
	for _, p := range d.(metricdata.Histogram[float64]).DataPoints {
		n += p.Count
	}
	return n
}

func attr(s sdktrace.ReadOnlySpan, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// fakeServer is an OpenAI-compatible handler that answers with a fixed
// script: SSE events (each written and flushed after a pause) or a JSON
// body. It remembers the body it received and when it wrote each event.
type fakeServer struct {
	events  []string // SSE data payloads
	json    string   // non-stream body, when events is empty
	status  int
	pause   time.Duration
	ctype   string
	onStart func(w http.ResponseWriter, r *http.Request)

	mu       sync.Mutex
	gotBody  []byte
	gotErr   error
	gotLen   int64
	written  []time.Time // before each event's write
	flushed  []time.Time // after its flush
	started  time.Time
	finished chan struct{}
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.started = time.Now()
	f.mu.Unlock()
	defer func() {
		if f.finished != nil {
			close(f.finished)
		}
	}()
	body, err := io.ReadAll(r.Body)
	f.mu.Lock()
	f.gotBody, f.gotErr, f.gotLen = body, err, r.ContentLength
	f.mu.Unlock()
	if f.onStart != nil {
		f.onStart(w, r)
	}
	if f.events == nil {
		if f.ctype != "" {
			w.Header().Set("Content-Type", f.ctype)
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		if f.status != 0 {
			w.WriteHeader(f.status)
		}
		time.Sleep(f.pause)
		_, _ = io.WriteString(w, f.json)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	if f.status != 0 {
		w.WriteHeader(f.status)
	}
	fl := w.(http.Flusher)
	for _, ev := range f.events {
		select {
		case <-r.Context().Done():
			return
		case <-time.After(f.pause):
		}
		f.mu.Lock()
		f.written = append(f.written, time.Now())
		f.mu.Unlock()
		if _, err := fmt.Fprintf(w, "data: %s\n\n", ev); err != nil {
			return
		}
		fl.Flush()
		f.mu.Lock()
		f.flushed = append(f.flushed, time.Now())
		f.mu.Unlock()
	}
}

func chatChunk(delta string, finish string) string {
	fr := "null"
	if finish != "" {
		fr = `"` + finish + `"`
	}
	return `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":` + delta + `,"finish_reason":` + fr + `}]}`
}

// chatStream is a typical OpenAI stream: a role-only chunk, content chunks,
// a finish chunk, a usage chunk, [DONE].
func chatStream(words []string, finish string, usage string) []string {
	ev := []string{chatChunk(`{"role":"assistant","content":""}`, "")}
	for _, w := range words {
		ev = append(ev, chatChunk(`{"content":"`+w+`"}`, ""))
	}
	ev = append(ev, chatChunk(`{}`, finish))
	if usage != "" {
		ev = append(ev, `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":`+usage+`}`)
	}
	return append(ev, "[DONE]")
}

// post sends body to srv's path and returns the response body.
func post(t *testing.T, c *http.Client, url, body string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// serve starts srv behind the middleware, closes both at the end.
func serve(t *testing.T, handler http.Handler) (*httptest.Server, *http.Client) {
	t.Helper()
	srv := httptest.NewServer(handler)
	c := srv.Client()
	t.Cleanup(func() {
		c.CloseIdleConnections()
		srv.Close()
	})
	return srv, c
}

// sseData returns the data payloads of an SSE body.
func sseData(b []byte) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}
