package openaihttp

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/llmtrace/llmtrace/otelstats"
)

// benchChunk is a typical vLLM chat chunk.
const benchChunk = `data: {"id":"chatcmpl-6f2a1b","object":"chat.completion.chunk","created":1733000000,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"content":" token"},"logprobs":null,"finish_reason":null}]}` + "\n\n"

// BenchmarkExchangeChunk is the per-chunk hot path: one SSE write read,
// parsed and delivered (live, no usage expected), in requests of 64 chunks
// (their arrival and finish amortized over them).
func BenchmarkExchangeChunk(b *testing.B) {
	tr, _ := otelstats.NewTracker(otelstats.WithTracerProvider(tracenoop.NewTracerProvider()), otelstats.WithMeterProvider(metricnoop.NewMeterProvider()))
	defer tr.Shutdown(context.Background())
	p := []byte(benchChunk)
	b.ReportAllocs()
	b.SetBytes(int64(len(p)))
	var ex *exchange
	n := 0
	for i := 0; b.Loop(); i++ {
		if i%64 == 0 {
			if ex != nil {
				ex.finish(outcome{end: time.Now()}, nil)
			}
			n++
			ex = newTestExchange(b, tr, n, false)
		}
		now := time.Now()
		ex.wrote(now, now, p, nil)
	}
}

// BenchmarkScanBody is the request scanner over a prompt (per byte).
func BenchmarkScanBody(b *testing.B) {
	body := []byte(`{"messages":[{"role":"user","content":"` + strings.Repeat(`Tell me about tracing. \"quoted\"\n`, 4000) + `"}],"model":"m","temperature":0.5}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		s := newFieldScanner(requestFields, nil)
		s.feed(body)
		if ri := requestInfoOf(s); ri.Model != "m" {
			b.Fatal(ri.Model)
		}
	}
}

// BenchmarkProxyStream is one streamed chat of 16 tokens through the
// proxy, in process, to an httptest upstream.
func BenchmarkProxyStream(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for range 16 {
			_, _ = io.WriteString(w, benchChunk)
			w.(http.Flusher).Flush()
		}
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	}))
	defer up.Close()
	tr, _ := otelstats.NewTracker(otelstats.WithTracerProvider(tracenoop.NewTracerProvider()), otelstats.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelstats.WithAutoSweep(time.Second))
	defer tr.Shutdown(context.Background())
	u, _ := url.Parse(up.URL)
	p, err := NewProxy(u, tr, WithTracerProvider(tracenoop.NewTracerProvider()), WithMeterProvider(metricnoop.NewMeterProvider()))
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(p)
	defer srv.Close()
	client := srv.Client()
	const body = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	b.ReportAllocs()
	for b.Loop() {
		resp, err := client.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	p.CloseIdleConnections()
	client.CloseIdleConnections()
}

// BenchmarkHTTPMetrics is a proxied request's two HTTP duration
// measurements (http.server.request.duration, http.client.request.duration)
// into the SDK's histograms, in a tight loop: what they cost with warm
// caches, beside what the side-by-side profile finds per request
// (BENCHMARKS.md, "Where the rest goes").
func BenchmarkHTTPMetrics(b *testing.B) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(context.Background())
	in, err := newInstruments(mp.Meter(ScopeName))
	if err != nil {
		b.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	b.ReportAllocs()
	for b.Loop() {
		in.recordServer(r, "/v1/chat/completions", http.StatusOK, "", 30*time.Millisecond)
		in.recordClient(http.MethodPost, "http", "127.0.0.1", 8000, http.StatusOK, "", 30*time.Millisecond)
	}
}
