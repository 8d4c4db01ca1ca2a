package openaihttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/llmtrace/llmtrace/openaihttp"
	"github.com/llmtrace/llmtrace/otelstats"
	"github.com/llmtrace/llmtrace/spans"
)

// exampleEngine is an OpenAI-compatible handler that streams two tokens.
func exampleEngine(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/event-stream")
	for _, ev := range []string{
		`{"choices":[{"delta":{"role":"assistant"}}]}`,
		`{"choices":[{"delta":{"content":"Hel"}}]}`,
		`{"choices":[{"delta":{"content":"lo"},"finish_reason":"stop"}]}`,
		`{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}`,
		`[DONE]`,
	} {
		fmt.Fprintf(w, "data: %s\n\n", ev)
		w.(http.Flusher).Flush()
	}
}

// The middleware around a server's mux: each chat request is a trace and
// counts in the serving metrics; /health passes untouched.
func ExampleNewHandler() {
	tp := sdktrace.NewTracerProvider(sdktrace.WithIDGenerator(spans.IDGenerator()))
	finished := make(chan otelstats.RequestStats, 1)
	tracker, _ := otelstats.NewTracker(otelstats.WithTracerProvider(tp), otelstats.WithAutoSweep(time.Second),
		otelstats.WithOnFinish(func(s *otelstats.RequestStats) { finished <- *s }))
	defer tracker.Shutdown(context.Background())

	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", exampleEngine)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	srv := httptest.NewServer(openaihttp.NewHandler(mux, tracker, openaihttp.WithTracerProvider(tp)))
	defer srv.Close()

	resp, _ := http.Post(srv.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"messages":[{"role":"user","content":"hi"}],"model":"llama","stream":true,"stream_options":{"include_usage":true}}`))
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	s := <-finished
	fmt.Println(s.Model, s.FinishReason, s.NumPromptTokens.N, s.NumOutputTokens, s.FirstTokenLatency.Valid)
	// Output: llama stop 5 2 true
}

// The proxy mounted in a program's own mux, beside its other routes: the
// upstream gets a traceparent in the request's trace.
func ExampleNewProxy() {
	var traceparent string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		traceparent = r.Header.Get("traceparent")
		exampleEngine(w, r)
	}))
	defer upstream.Close()

	tp := sdktrace.NewTracerProvider(sdktrace.WithIDGenerator(spans.IDGenerator()))
	finished := make(chan otelstats.RequestStats, 1)
	tracker, _ := otelstats.NewTracker(otelstats.WithTracerProvider(tp), otelstats.WithAutoSweep(time.Second),
		otelstats.WithOnFinish(func(s *otelstats.RequestStats) { finished <- *s }))
	defer tracker.Shutdown(context.Background())
	up, _ := url.Parse(upstream.URL + "/v1")
	proxy, err := openaihttp.NewProxy(up, tracker, openaihttp.WithTracerProvider(tp))
	if err != nil {
		panic(err)
	}
	defer proxy.CloseIdleConnections()

	mux := http.NewServeMux()
	mux.Handle("/v1/", proxy)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	srv := httptest.NewServer(mux)
	defer srv.Close()

	resp, _ := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"llama","stream":true}`))
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	s := <-finished
	fmt.Println(s.Model, s.FinishReason, s.NumOutputTokens, strings.HasPrefix(traceparent, "00-"+s.TraceID+"-"))
	// Output: llama stop 2 true
}
