package openaihttp_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/openaihttp"
	"github.com/llmtrace/llmtrace/otelstats"
	"github.com/llmtrace/llmtrace/spans"
)

type harness struct {
	t      *testing.T
	tp     *sdktrace.TracerProvider
	mp     *sdkmetric.MeterProvider
	rec    *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	tr     *otelstats.Tracker
	p      *openaihttp.Proxy
	srv    *httptest.Server
	up     *httptest.Server

	mu    sync.Mutex
	stats []otelstats.RequestStats
}

// newHarness starts upstream, and a proxy to it (to dead instead, when
// set) mounted under a mux of the test's own.
func newHarness(t *testing.T, upstream http.Handler, popts []openaihttp.Option, opts ...otelstats.Option) *harness {
	t.Helper()
	return newHarnessTP(t, nil, upstream, popts, opts...)
}

// newHarnessTP is newHarness with more TracerProvider options (a sampler).
func newHarnessTP(t *testing.T, tpOpts []sdktrace.TracerProviderOption, upstream http.Handler, popts []openaihttp.Option, opts ...otelstats.Option) *harness {
	t.Helper()
	h := &harness{t: t, rec: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	tp := sdktrace.NewTracerProvider(append([]sdktrace.TracerProviderOption{sdktrace.WithSpanProcessor(h.rec),
		sdktrace.WithIDGenerator(spans.IDGenerator())}, tpOpts...)...)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(h.reader))
	h.tp, h.mp = tp, mp
	h.up = httptest.NewServer(upstream)
	u, _ := url.Parse(h.up.URL)
	all := append([]otelstats.Option{
		otelstats.WithTracerProvider(tp), otelstats.WithMeterProvider(mp), otelstats.WithTokenLatencies(true),
		otelstats.WithAutoSweep(time.Second),
		otelstats.WithOnFinish(func(s *otelstats.RequestStats) {
			h.mu.Lock()
			h.stats = append(h.stats, *s)
			h.mu.Unlock()
		}),
	}, opts...)
	tr, err := otelstats.NewTracker(all...)
	if err != nil {
		t.Fatal(err)
	}
	h.tr = tr
	p, err := openaihttp.NewProxy(u, tr, append([]openaihttp.Option{openaihttp.WithTracerProvider(tp), openaihttp.WithMeterProvider(mp)}, popts...)...)
	if err != nil {
		t.Fatal(err)
	}
	h.p = p
	mux := http.NewServeMux()
	mux.Handle("/", p)
	h.srv = httptest.NewServer(mux)
	t.Cleanup(func() {
		h.srv.CloseClientConnections()
		h.srv.Close()
		h.up.CloseClientConnections()
		h.up.Close()
		p.CloseIdleConnections()
		_ = tr.Shutdown(context.Background())
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	})
	return h
}

// streamOf is an upstream that reads the request's body and streams one
// content chunk per token, the last finishing with "stop", then [DONE].
func streamOf(tokens ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for i, tok := range tokens {
			var fin any
			if i == len(tokens)-1 {
				fin = "stop"
			}
			sseWrite(w, chunk(map[string]any{"content": tok}, fin))
		}
		sseWrite(w, "[DONE]")
	})
}

// waitStats waits for n finished requests.
func (h *harness) waitStats(n int) []otelstats.RequestStats {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		h.mu.Lock()
		got := append([]otelstats.RequestStats(nil), h.stats...)
		h.mu.Unlock()
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%d finished requests, want %d", len(got), n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// spansOf returns a trace's spans by name once its llm.proxy.wait_first_token
// span has ended (the proxy ends it last): the proxy emits its spans after the request's FINISHED,
// which is when the test learns of it.
func (h *harness) spansOf(traceID string) map[string][]sdktrace.ReadOnlySpan {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out := map[string][]sdktrace.ReadOnlySpan{}
		for _, s := range h.rec.Ended() {
			if s.SpanContext().TraceID().String() == traceID {
				out[s.Name()] = append(out[s.Name()], s)
			}
		}
		if len(out[openaihttp.SpanWaitFirstToken]) > 0 {
			return out
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("no %s span in trace %s (have %v)", openaihttp.SpanWaitFirstToken, traceID, keys(out))
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (h *harness) collect() map[string]metricdata.Aggregation {
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		h.t.Fatal(err)
	}
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

func (h *harness) counter(name string) int64 {
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		h.t.Fatal(err)
	}
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
					n += p.Value
				}
			}
		}
	}
	return n
}

func (h *harness) post(ctx context.Context, path, body string, hdr ...string) *http.Response {
	h.t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	return resp
}

// sseWrite writes one SSE event and flushes it.
func sseWrite(w http.ResponseWriter, v any) {
	var b []byte
	if s, ok := v.(string); ok {
		b = []byte(s)
	} else {
		b, _ = json.Marshal(v)
	}
	fmt.Fprintf(w, "data: %s\n\n", b)
	w.(http.Flusher).Flush()
}

func chunk(delta map[string]any, finish any) map[string]any {
	return map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m",
		"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
}

func usageChunk(prompt, completion int) map[string]any {
	return map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m", "choices": []any{},
		"usage": map[string]any{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
			"prompt_tokens_details": map[string]any{"cached_tokens": 3}}}
}

// readEvents reads SSE events from r, calling f with each data payload and
// its arrival time; it returns at EOF or error.
func readEvents(r io.Reader, f func(data string, at time.Time)) error {
	br := bufio.NewReader(r)
	var data []string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return err
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			if len(data) > 0 {
				f(strings.Join(data, "\n"), time.Now())
			}
			data = nil
			continue
		}
		if d, ok := strings.CutPrefix(line, "data:"); ok {
			data = append(data, strings.TrimPrefix(d, " "))
		}
	}
}

const proxyChatBody = `{"model":"m","stream":true,"stream_options":{"include_usage":true},"temperature":0.5,"max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`

// TestStreamUnbufferedTTFTTraceparent: chunks reach the client one by one
// as the upstream writes them (the upstream waits for the client to have
// each chunk before writing the next, so any buffering deadlocks), the
// traceparent upstream carries the root's ids, TTFT ends at the first
// content chunk (not the role-only one), and the usage sets the counts.
func TestProxyStreamUnbufferedTTFTTraceparent(t *testing.T) {
	const contentChunks = 5
	next := make(chan struct{}, contentChunks)
	var gotTP string
	var gotBody []byte
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotTP = r.Header.Get("traceparent")
		gotBody, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		sseWrite(w, chunk(map[string]any{"role": "assistant", "content": ""}, nil))
		time.Sleep(150 * time.Millisecond) // prefill
		for i := range contentChunks {
			if i > 0 {
				select {
				case <-next:
				case <-time.After(5 * time.Second):
					t.Error("the client never got the previous chunk: the proxy buffers")
					return
				}
			}
			var fin any
			if i == contentChunks-1 {
				fin = "length"
			}
			sseWrite(w, chunk(map[string]any{"content": fmt.Sprint("tok", i)}, fin))
		}
		sseWrite(w, usageChunk(7, 12))
		sseWrite(w, "[DONE]")
	})
	h := newHarness(t, up, nil)
	start := time.Now()
	resp := h.post(context.Background(), "/v1/chat/completions", proxyChatBody)
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("Content-Type %q", ct)
	}
	var firstContent time.Time
	var got []string
	err := readEvents(resp.Body, func(data string, at time.Time) {
		got = append(got, data)
		if strings.Contains(data, `"content":"tok`) {
			if firstContent.IsZero() {
				firstContent = at
			}
			next <- struct{}{}
		}
	})
	if err != io.EOF {
		t.Fatalf("reading the stream: %v", err)
	}
	if len(got) != 1+contentChunks+2 || got[len(got)-1] != "[DONE]" {
		t.Fatalf("events %q", got)
	}
	if string(gotBody) != proxyChatBody {
		t.Errorf("upstream got body %q", gotBody)
	}

	s := h.waitStats(1)[0]
	if s.FinishReason != "length" || s.NumOutputTokens != 12 || s.NumPromptTokens.N != 7 || !s.NumPromptTokens.Valid {
		t.Errorf("stats %+v", s)
	}
	ttft := s.FirstTokenLatency.Value
	if !s.FirstTokenLatency.Valid || ttft < 150*time.Millisecond || ttft > firstContent.Sub(start)+5*time.Millisecond {
		t.Errorf("TTFT %v; the first content chunk reached the client %v after the request", ttft, firstContent.Sub(start))
	}
	if len(s.OutputTokenLatencies) != contentChunks-1 {
		t.Errorf("%d ITL gaps, want %d", len(s.OutputTokenLatencies), contentChunks-1)
	}

	// traceparent: the root's trace, the upstream call's span, sampled.
	sp := h.spansOf(s.TraceID)
	tp := strings.Split(gotTP, "-")
	if len(tp) != 4 || tp[1] != s.TraceID || tp[3] != "01" {
		t.Errorf("upstream traceparent %q; root %s/%s", gotTP, s.TraceID, s.SpanID)
	}
	if cs := sp["POST"]; len(cs) != 1 || cs[0].SpanKind() != trace.SpanKindClient || cs[0].SpanContext().SpanID().String() != tp[2] ||
		cs[0].Parent().SpanID().String() != s.SpanID {
		t.Errorf("no CLIENT span with the traceparent's id %s under the root %s: %v", tp[2], s.SpanID, sp["POST"])
	} else {
		ca := attrMap(cs[0].Attributes())
		if ca["http.request.method"] != "POST" || ca["http.response.status_code"] != int64(200) || ca["server.address"] != "127.0.0.1" ||
			ca["url.full"] != h.up.URL+"/v1/chat/completions" || ca["network.protocol.version"] != "1.1" {
			t.Errorf("CLIENT span attributes %v", ca)
		}
	}
	root := sp["chat m"]
	if len(root) != 1 || root[0].SpanKind() != trace.SpanKindServer {
		t.Fatalf("spans %v", keys(sp))
	}
	r := root[0]
	attr := attrMap(r.Attributes())
	if attr["gen_ai.request.model"] != "m" || attr["gen_ai.operation.name"] != "chat" || attr["gen_ai.usage.output_tokens"] != int64(12) ||
		attr["gen_ai.usage.input_tokens"] != int64(7) || attr["gen_ai.request.temperature"] != 0.5 || attr["gen_ai.request.max_tokens"] != int64(64) {
		t.Errorf("root attributes %v", attr)
	}
	if attr["gen_ai.response.id"] != "chatcmpl-1" || attr["gen_ai.response.model"] != "m" || attr["http.response.status_code"] != int64(200) ||
		attr["http.route"] != "/v1/chat/completions" || attr["http.request.method"] != "POST" {
		t.Errorf("root HTTP and response attributes %v", attr)
	}
	for _, name := range []string{openaihttp.SpanWaitFirstToken, openaihttp.SpanStream, "llm.detokenize", "llm.input_processing", "POST"} {
		if len(sp[name]) != 1 {
			t.Fatalf("%s: %d spans (have %v)", name, len(sp[name]), keys(sp))
		}
		c := sp[name][0]
		if c.Parent().SpanID() != r.SpanContext().SpanID() {
			t.Errorf("%s is not a child of the root", name)
		}
		if c.StartTime().Before(r.StartTime()) || c.EndTime().After(r.EndTime()) {
			t.Errorf("%s [%v, %v] outside the root [%v, %v]", name, c.StartTime(), c.EndTime(), r.StartTime(), r.EndTime())
		}
	}
	w := sp[openaihttp.SpanWaitFirstToken][0]
	st := sp[openaihttp.SpanStream][0]
	if d := w.EndTime().Sub(s.ArrivalTime.Add(ttft)); !w.EndTime().Equal(st.StartTime()) || d > time.Microsecond || d < -time.Microsecond {
		t.Errorf("wait ends %v, stream starts %v, first token %v", w.EndTime(), st.StartTime(), s.ArrivalTime.Add(ttft))
	}
	if len(w.Events()) != 1 || w.Events()[0].Name != openaihttp.EventHeaders {
		t.Errorf("wait events %v", w.Events())
	}
	sa := attrMap(st.Attributes())
	if sa[string(openaihttp.AttrContentChunks)] != int64(contentChunks) || sa[string(openaihttp.AttrChunks)] != int64(contentChunks+3) ||
		sa[string(openaihttp.AttrStalls)] != int64(0) || sa["gen_ai.usage.cache_read.input_tokens"] != int64(3) {
		t.Errorf("stream attributes %v", sa)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func attrMap(kvs []attribute.KeyValue) map[string]any {
	m := map[string]any{}
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	return m
}

// gapsUpstream streams one content chunk after each gap.
func gapsUpstream(gaps []time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		sseWrite(w, chunk(map[string]any{"content": "first"}, nil))
		for i, g := range gaps {
			time.Sleep(g)
			var fin any
			if i == len(gaps)-1 {
				fin = "stop"
			}
			sseWrite(w, chunk(map[string]any{"content": "x"}, fin))
		}
		sseWrite(w, "[DONE]")
	})
}

func TestProxyStallEvent(t *testing.T) {
	gaps := []time.Duration{}
	for range 6 {
		gaps = append(gaps, 10*time.Millisecond)
	}
	gaps = append(gaps, 400*time.Millisecond)
	for range 3 {
		gaps = append(gaps, 10*time.Millisecond)
	}
	h := newHarness(t, gapsUpstream(gaps), nil)
	resp := h.post(context.Background(), "/v1/chat/completions", `{"model":"m","stream":true}`)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	s := h.waitStats(1)[0]
	st := h.spansOf(s.TraceID)[openaihttp.SpanStream]
	if len(st) != 1 {
		t.Fatal("no stream span")
	}
	// A loaded machine may add stalls of its own after the injected one;
	// the injected one must be there, once, with its gap and the median
	// of the steady gaps before it.
	var stalls []sdktrace.Event
	for _, e := range st[0].Events() {
		if e.Name == openaihttp.EventStall && attrMap(e.Attributes)[string(openaihttp.AttrStallGap)].(float64) >= 0.39 {
			stalls = append(stalls, e)
		}
	}
	if len(stalls) != 1 {
		t.Fatalf("%d stall events of the injected gap, want 1: %v", len(stalls), st[0].Events())
	}
	a := attrMap(stalls[0].Attributes)
	gap := a[string(openaihttp.AttrStallGap)].(float64)
	med := a[string(openaihttp.AttrStallMedian)].(float64)
	if gap > 0.6 || med < 0.009 || med > 0.05 || a[string(openaihttp.AttrStallChunk)] != int64(7) {
		t.Errorf("stall %v", a)
	}
	n := attrMap(st[0].Attributes())[string(openaihttp.AttrStalls)].(int64)
	if n < 1 || h.counter(openaihttp.MetricStalls) != n || int(n) != len(st[0].Events()) {
		t.Errorf("stall counts: span %d, metric %d, events %d", n, h.counter(openaihttp.MetricStalls), len(st[0].Events()))
	}
	// Without a usage every content chunk is one token.
	if s.NumOutputTokens != len(gaps)+1 || s.FinishReason != "stop" || s.NumPromptTokens.Valid {
		t.Errorf("stats %+v", s)
	}
}

func TestProxyNonStream(t *testing.T) {
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(30 * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"cmpl-9","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"completion_tokens":4,"total_tokens":15}}`)
	})
	h := newHarness(t, up, nil)
	resp := h.post(context.Background(), "/v1/chat/completions", `{"model":"m","messages":[]}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"content":"hello"`) {
		t.Fatalf("body %s", b)
	}
	s := h.waitStats(1)[0]
	// SPEC §2: in one piece, so no token times; e2e and the counts.
	if s.FinishReason != "stop" || s.NumOutputTokens != 4 || s.NumPromptTokens.N != 11 || s.FirstTokenLatency.Valid ||
		s.TimePerOutputToken.Valid || s.DecodeLatency.Valid || !s.E2ELatency.Valid || s.E2ELatency.Value < 30*time.Millisecond {
		t.Errorf("stats %+v", s)
	}
	sp := h.spansOf(s.TraceID)
	if len(sp[openaihttp.SpanWaitFirstToken]) != 1 || len(sp[openaihttp.SpanStream]) != 0 || len(sp["llm.detokenize"]) != 0 || len(sp["POST"]) != 1 {
		t.Errorf("spans %v", keys(sp))
	}
	ra := attrMap(sp["chat m"][0].Attributes())
	if ra["gen_ai.response.id"] != "cmpl-9" || ra["gen_ai.response.model"] != "m" {
		t.Errorf("root %v", ra)
	}
}

// leavingWriter is a client that leaves the moment the response's bytes
// reach it, as a client reading a response with a Content-Length does
// (and then closes its connection, which ends the request's context),
// before the layer has read what was written.
type leavingWriter struct {
	*httptest.ResponseRecorder
	leave func()
}

func (w leavingWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseRecorder.Write(p)
	w.leave()
	// Room for the server's watch on the context to see it end: the
	// record must not depend on whether it did.
	time.Sleep(5 * time.Millisecond)
	return n, err
}

// TestProxyClientLeavesOnceServed: a client that got the whole response
// and left before the proxy read the bytes was served, not an abort (a
// suite run recorded 1 of 40 such clients as an abort with no first
// token).
func TestProxyClientLeavesOnceServed(t *testing.T) {
	for _, tc := range []struct {
		name, body, reqBody string
		check               func(s otelstats.RequestStats) bool
	}{
		{"stream", "data: {\"choices\":[{\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
			`{"model":"m","stream":true}`,
			func(s otelstats.RequestStats) bool { return s.FirstTokenLatency.Valid && s.NumOutputTokens == 1 }},
		{"json", `{"object":"chat.completion","model":"m","choices":[{"index":0,"message":{"content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`,
			`{"model":"m"}`,
			func(s otelstats.RequestStats) bool { return s.NumOutputTokens == 2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if strings.Contains(tc.reqBody, "stream") {
					w.Header().Set("Content-Type", "text/event-stream")
				} else {
					w.Header().Set("Content-Type", "application/json")
				}
				io.WriteString(w, tc.body) // small, in one write: a Content-Length
			})
			h := newHarness(t, up, nil)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/chat/completions", strings.NewReader(tc.reqBody))
			r.Header.Set("Content-Type", "application/json")
			w := leavingWriter{httptest.NewRecorder(), cancel}
			h.p.ServeHTTP(w, r)
			if w.Body.String() != tc.body {
				t.Fatalf("the client got %q", w.Body)
			}
			s := h.waitStats(1)[0]
			if s.FinishReason != otelstats.FinishStop || s.ErrorType != "" || !tc.check(s) {
				t.Errorf("stats %+v", s)
			}
		})
	}
}

// TestClientDisconnect: the client leaves mid-stream; the request is an
// abort with what was delivered, the upstream request is cancelled, and
// nothing is left running (goleak in TestMain).
func TestProxyClientDisconnect(t *testing.T) {
	upstreamGone := make(chan struct{})
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; ; i++ {
			sseWrite(w, chunk(map[string]any{"content": "x"}, nil))
			select {
			case <-r.Context().Done():
				close(upstreamGone)
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	})
	h := newHarness(t, up, nil)
	ctx, cancel := context.WithCancel(context.Background())
	resp := h.post(ctx, "/v1/chat/completions", `{"model":"m","stream":true}`)
	n := 0
	readEvents(resp.Body, func(string, time.Time) {
		if n++; n == 3 {
			cancel()
		}
	})
	resp.Body.Close()
	select {
	case <-upstreamGone:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream request was not cancelled")
	}
	s := h.waitStats(1)[0]
	if s.FinishReason != otelstats.FinishAbort || s.ErrorType != "abort" || s.NumOutputTokens < 3 || !s.FirstTokenLatency.Valid {
		t.Errorf("stats %+v", s)
	}
	sp := h.spansOf(s.TraceID)
	if r := sp["chat m"]; len(r) != 1 || r[0].Status().Code != codes.Error {
		t.Errorf("root %v", sp["chat m"])
	}
	if len(sp[openaihttp.SpanStream]) != 1 {
		t.Errorf("no partial stream span: %v", keys(sp))
	}
}

func TestProxyUpstreamDown(t *testing.T) {
	// Point the proxy at a port nobody listens on.
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	deadAddr := l.Addr().String()
	l.Close()
	h := newHarness(t, http.NotFoundHandler(), nil)
	dead, _ := url.Parse("http://" + deadAddr)
	p, err := openaihttp.NewProxy(dead, h.tr, openaihttp.WithTracerProvider(h.tp), openaihttp.WithMeterProvider(h.mp))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("status %d", resp.StatusCode)
	}
	s := h.waitStats(1)[0]
	if s.FinishReason != otelstats.FinishError || s.ErrorType != openaihttp.ErrorConnectionRefused || s.FirstTokenLatency.Valid {
		t.Errorf("stats %+v", s)
	}
	sp := h.spansOf(s.TraceID)
	if len(sp["chat m"]) != 1 {
		t.Fatalf("no root: %v, %+v", keys(sp), s)
	}
	root := sp["chat m"][0]
	if root.Status().Code != codes.Error || attrMap(root.Attributes())["error.type"] != openaihttp.ErrorConnectionRefused {
		t.Errorf("root %v %v", root.Status(), root.Attributes())
	}
	w := sp[openaihttp.SpanWaitFirstToken][0]
	if w.Status().Code != codes.Error || attrMap(w.Attributes())["http.response.status_code"] != int64(502) {
		t.Errorf("wait span %v %v", w.Status(), w.Attributes())
	}
	if c := sp["POST"]; len(c) != 1 || c[0].Status().Code != codes.Error || attrMap(c[0].Attributes())["error.type"] != openaihttp.ErrorConnectionRefused {
		t.Errorf("CLIENT span %v", c)
	}
}

func TestProxyUpstreamErrorStatus(t *testing.T) {
	const errBody = `{"error":{"message":"slow down","type":"rate_limit"}}`
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, errBody)
	})
	h := newHarness(t, up, nil)
	resp := h.post(context.Background(), "/v1/completions", `{"model":"m","prompt":"x"}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || string(b) != errBody {
		t.Errorf("client got %d %s", resp.StatusCode, b)
	}
	s := h.waitStats(1)[0]
	if s.FinishReason != otelstats.FinishError || s.ErrorType != "429" || s.Operation != "text_completion" {
		t.Errorf("stats %+v", s)
	}
}

func TestProxyUpstreamDiesMidStream(t *testing.T) {
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		sseWrite(w, chunk(map[string]any{"content": "a"}, nil))
		sseWrite(w, chunk(map[string]any{"content": "b"}, nil))
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close() // the engine crashed
		}
	})
	h := newHarness(t, up, nil)
	resp := h.post(context.Background(), "/v1/chat/completions", `{"model":"m","stream":true}`)
	err := readEvents(resp.Body, func(string, time.Time) {})
	resp.Body.Close()
	if err == io.EOF {
		t.Error("the client saw a clean end of a broken stream")
	}
	s := h.waitStats(1)[0]
	if s.FinishReason != otelstats.FinishError || s.ErrorType != openaihttp.ErrorUpstream || s.NumOutputTokens != 2 {
		t.Errorf("stats %+v", s)
	}
}

func TestProxyIncomingTraceparentAndPassthrough(t *testing.T) {
	var mu sync.Mutex
	got := map[string]string{}
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.URL.Path] = r.Header.Get("traceparent")
		mu.Unlock()
		if r.URL.Path == "/v1/models" {
			io.WriteString(w, `{"data":[]}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		sseWrite(w, chunk(map[string]any{"content": "a"}, "stop"))
		sseWrite(w, "[DONE]")
	})
	h := newHarness(t, up, nil)
	const caller = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	resp := h.post(context.Background(), "/v1/chat/completions", `{"model":"m","stream":true}`, "traceparent", caller)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	s := h.waitStats(1)[0]
	if s.TraceID != "0af7651916cd43dd8448eb211c80319c" {
		t.Errorf("root trace %s, want the caller's", s.TraceID)
	}
	sp := h.spansOf(s.TraceID)
	root := sp["chat m"][0]
	if root.Parent().SpanID().String() != "b7ad6b7169203331" {
		t.Errorf("root parent %v", root.Parent())
	}
	mu.Lock()
	if tp := got["/v1/chat/completions"]; tp != "00-"+s.TraceID+"-"+sp["POST"][0].SpanContext().SpanID().String()+"-01" {
		t.Errorf("upstream traceparent %q, not the CLIENT span's", tp)
	}
	mu.Unlock()

	// Untraced paths pass through untouched, the caller's headers included.
	req, _ := http.NewRequest(http.MethodGet, h.srv.URL+"/v1/models", nil)
	req.Header.Set("traceparent", caller)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != `{"data":[]}` {
		t.Errorf("passthrough body %s", b)
	}
	mu.Lock()
	if got["/v1/models"] != caller {
		t.Errorf("passthrough traceparent %q", got["/v1/models"])
	}
	mu.Unlock()
	if len(h.waitStats(1)) != 1 {
		t.Error("an untraced path was traced")
	}
}

// TestProxyBodiesPassUntouched: bodies the proxy cannot read a model from
// — not JSON, no model, a model past 40 KB of prompt — reach the upstream
// byte for byte, and still get a root, with error.type when the upstream
// refuses them.
func TestProxyBodiesPassUntouched(t *testing.T) {
	var mu sync.Mutex
	var bodies [][]byte
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, b)
		mu.Unlock()
		w.WriteHeader(400)
	})
	h := newHarness(t, up, nil)
	inputs := []struct{ body, model, problem string }{
		{"not json", "unknown", "not_json"},
		{`{"messages":[]}`, "unknown", "no_model"},
		{`{"messages":[{"content":"` + strings.Repeat("x", 40<<10) + `"}],"model":"m"}`, "m", ""},
	}
	for _, in := range inputs {
		resp := h.post(context.Background(), "/v1/chat/completions", in.body)
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Errorf("status %d", resp.StatusCode)
		}
	}
	stats := h.waitStats(len(inputs))
	mu.Lock()
	defer mu.Unlock()
	for i, in := range inputs {
		if i >= len(bodies) || !bytes.Equal(bodies[i], []byte(in.body)) {
			t.Errorf("body %d reached upstream as %.40q", i, bodies[i])
		}
		if s := stats[i]; s.Model != in.model || s.ErrorType != "400" {
			t.Errorf("%d: model %q error %q", i, s.Model, s.ErrorType)
		}
		root := h.spansOf(stats[i].TraceID)["chat "+in.model][0]
		if got, _ := attrMap(root.Attributes())["llm.http.request_body"].(string); got != in.problem {
			t.Errorf("%d: llm.http.request_body %q, want %q", i, got, in.problem)
		}
	}
}

func TestProxyResponsesAPIStream(t *testing.T) {
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"model\":\"m\",\"status\":\"in_progress\"}}\n\n")
		for _, d := range []string{"Hel", "lo"} {
			fmt.Fprintf(w, "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":%q}\n\n", d)
			w.(http.Flusher).Flush()
			time.Sleep(5 * time.Millisecond)
		}
		fmt.Fprint(w, "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\",\"status\":\"completed\",\"usage\":{\"input_tokens\":9,\"output_tokens\":3}}}\n\n")
	})
	h := newHarness(t, up, nil)
	resp := h.post(context.Background(), "/v1/responses", `{"model":"m","stream":true,"input":"hi"}`)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	s := h.waitStats(1)[0]
	if s.FinishReason != "stop" || s.NumOutputTokens != 3 || s.NumPromptTokens.N != 9 || len(s.OutputTokenLatencies) != 1 {
		t.Errorf("stats %+v", s)
	}
}

// TestProxyLongStreamGoesLive: past 4,096 held deliveries the proxy records as
// chunks come; the counts stay right and the prompt's size from the final
// usage goes on FINISHED.
func TestProxyLongStreamGoesLive(t *testing.T) {
	const n = 4096 + 100
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for range n {
			fmt.Fprint(w, `data: {"choices":[{"delta":{"content":"x"}}]}`+"\n\n")
		}
		sseWrite(w, chunk(map[string]any{}, "length"))
		sseWrite(w, usageChunk(21, n))
		sseWrite(w, "[DONE]")
	})
	h := newHarness(t, up, nil)
	resp := h.post(context.Background(), "/v1/chat/completions", proxyChatBody)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	s := h.waitStats(1)[0]
	if s.NumOutputTokens != n || s.NumPromptTokens.N != 21 || s.FinishReason != "length" || len(s.OutputTokenLatencies) != n-1 {
		t.Errorf("stats: %d output, prompt %+v, %s, %d gaps", s.NumOutputTokens, s.NumPromptTokens, s.FinishReason, len(s.OutputTokenLatencies))
	}
}

// TestProxyHeadSamplerKeepsTracesWhole: with the TracerProvider's sampler
// deciding (a tracker on the Tracer path, given a provider with a sampler), a trace
// is kept or dropped whole: the proxy's own spans join only roots the
// sampler kept, never a root it dropped, and RequestStats.Sampled says
// which traces were kept.
func TestProxyHeadSamplerKeepsTracesWhole(t *testing.T) {
	up := streamOf("a", "b")
	for _, tc := range []struct {
		name    string
		sampler sdktrace.Sampler
		n       int
	}{
		{"never", sdktrace.ParentBased(sdktrace.NeverSample()), 8},
		{"ratio", sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.5)), 40},
		{"always", sdktrace.AlwaysSample(), 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarnessTP(t, []sdktrace.TracerProviderOption{sdktrace.WithSampler(tc.sampler)}, up, nil)
			for range tc.n {
				// Read to the end: the body ends when the handler returns,
				// after the request's spans were handed over.
				resp := h.post(context.Background(), "/v1/chat/completions", proxyChatBody)
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			kept := map[string]bool{}
			for _, s := range h.waitStats(tc.n) {
				if s.Sampled {
					kept[s.TraceID] = true
				}
			}
			spansIn, roots := map[string]int{}, map[string]bool{}
			for _, s := range h.rec.Ended() {
				id := s.SpanContext().TraceID().String()
				spansIn[id]++
				if !s.Parent().IsValid() {
					roots[id] = true
				}
			}
			for id, n := range spansIn {
				if !roots[id] {
					t.Errorf("trace %s: %d spans without their root, which the sampler dropped", id, n)
				}
				if !kept[id] {
					t.Errorf("trace %s exported, but its RequestStats say it was dropped", id)
				}
			}
			for id := range kept {
				if len(h.spansOf(id)[openaihttp.SpanWaitFirstToken]) != 1 {
					t.Errorf("kept trace %s lacks the proxy's spans", id)
				}
			}
			// 40 requests at one half: all or none kept has odds of 2^-39.
			want := map[string]bool{"never": len(kept) == 0, "always": len(kept) == tc.n,
				"ratio": len(kept) > 0 && len(kept) < tc.n}
			if !want[tc.name] {
				t.Errorf("%d of %d traces kept by %s", len(kept), tc.n, tc.sampler.Description())
			}
		})
	}
}

// A caller's traceparent, sampled and not.
const (
	sampled    = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	notSampled = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
)

// TestProxyHeadSamplerAndIncomingParent: what a TracerProvider's sampler,
// on the Tracer path, makes of a request that came with a traceparent. An
// untrusted caller's flag decides nothing, so a parent-based sampler sees
// a sampled parent and keeps the trace; traceidratio decides by the trace
// id, parent or not; a trusted caller's flag decides.
func TestProxyHeadSamplerAndIncomingParent(t *testing.T) {
	up := streamOf("a")
	for _, tc := range []struct {
		name    string
		sampler sdktrace.Sampler
		trust   bool
		parent  string
		kept    bool
	}{
		{"parent-based, untrusted, not sampled", sdktrace.ParentBased(sdktrace.NeverSample()), false, notSampled, true},
		{"parent-based, no parent", sdktrace.ParentBased(sdktrace.NeverSample()), false, "", false},
		{"trace id ratio 0, untrusted, sampled", sdktrace.TraceIDRatioBased(0), false, sampled, false},
		{"trace id ratio 1, untrusted, not sampled", sdktrace.TraceIDRatioBased(1), false, notSampled, true},
		{"parent-based, trusted, not sampled", sdktrace.ParentBased(sdktrace.AlwaysSample()), true, notSampled, false},
		{"parent-based, trusted, sampled", sdktrace.ParentBased(sdktrace.NeverSample()), true, sampled, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarnessTP(t, []sdktrace.TracerProviderOption{sdktrace.WithSampler(tc.sampler)}, up,
				[]openaihttp.Option{openaihttp.WithTrustIncomingSampling(tc.trust)})
			var hdr []string
			if tc.parent != "" {
				hdr = []string{"traceparent", tc.parent}
			}
			resp := h.post(context.Background(), "/v1/chat/completions", proxyChatBody, hdr...)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			s := h.waitStats(1)[0]
			if n := len(h.rec.Ended()); s.Sampled != tc.kept || (n > 0) != tc.kept {
				t.Errorf("Sampled %v (%s), %d spans; want kept %v", s.Sampled, s.SamplingReason, n, tc.kept)
			}
		})
	}
}

// TestProxyHeadSamplerAtArrival: with a head sampler
// (otelstats.WithHeadSampler, what otelconf makes of OTEL_TRACES_SAMPLER),
// the proxy decides before calling the upstream, so the traceparent the
// upstream gets carries the decision its own parent-based sampler follows,
// and agrees with what is exported: a kept trace whole, a dropped one
// without a span. An untrusted caller's flag decides nothing, not even
// under a parent-based sampler; a trusted caller's does.
func TestProxyHeadSamplerAtArrival(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sampler sdktrace.Sampler
		trust   bool
		parent  string
		n       int
		kept    string // "all", "none" or "some"
	}{
		{"ratio, no parent", sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.5)), false, "", 40, "some"},
		{"parent-based never, untrusted, sampled", sdktrace.ParentBased(sdktrace.NeverSample()), false, sampled, 4, "none"},
		{"parent-based never, trusted, sampled", sdktrace.ParentBased(sdktrace.NeverSample()), true, sampled, 4, "all"},
		{"parent-based always, trusted, not sampled", sdktrace.ParentBased(sdktrace.AlwaysSample()), true, notSampled, 4, "none"},
		{"ratio 1, untrusted, not sampled", sdktrace.TraceIDRatioBased(1), false, notSampled, 4, "all"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			told := map[string]bool{} // trace id → the sampled flag the upstream got
			stream := streamOf("a", "b")
			up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
				mu.Lock()
				told[sc.TraceID().String()] = sc.IsSampled()
				mu.Unlock()
				stream.ServeHTTP(w, r)
			})
			rec := tracetest.NewSpanRecorder()
			h := newHarness(t, up, []openaihttp.Option{openaihttp.WithTrustIncomingSampling(tc.trust), openaihttp.WithSpanProcessor(rec)},
				otelstats.WithSpanProcessor(rec), otelstats.WithHeadSampler(tc.sampler))
			var hdr []string
			if tc.parent != "" {
				hdr = []string{"traceparent", tc.parent}
			}
			for range tc.n {
				resp := h.post(context.Background(), "/v1/chat/completions", proxyChatBody, hdr...)
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			kept := 0
			spansIn := map[string]int{}
			for _, s := range rec.Ended() {
				spansIn[s.SpanContext().TraceID().String()]++
			}
			for _, s := range h.waitStats(tc.n) {
				mu.Lock()
				flag, ok := told[s.TraceID]
				mu.Unlock()
				if !ok {
					t.Fatalf("trace %s never reached the upstream", s.TraceID)
				}
				if flag != s.Sampled {
					t.Errorf("trace %s: the upstream was told sampled=%v, the trace was kept: %v (%s)", s.TraceID, flag, s.Sampled, s.SamplingReason)
				}
				if s.Sampled {
					kept++
					if spansIn[s.TraceID] < 4 {
						t.Errorf("kept trace %s has %d spans, want the tracker's and the proxy's", s.TraceID, spansIn[s.TraceID])
					}
				} else if tc.parent == "" && spansIn[s.TraceID] > 0 {
					t.Errorf("dropped trace %s has %d spans", s.TraceID, spansIn[s.TraceID])
				}
			}
			if tc.parent != "" && kept == 0 && len(rec.Ended()) > 0 {
				t.Errorf("%d spans exported for dropped traces", len(rec.Ended()))
			}
			got := "some"
			switch kept {
			case 0:
				got = "none"
			case tc.n:
				got = "all"
			}
			if got != tc.kept {
				t.Errorf("%d of %d traces kept (%s), want %s", kept, tc.n, got, tc.kept)
			}
		})
	}
}
