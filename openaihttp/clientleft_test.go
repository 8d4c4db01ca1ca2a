package openaihttp_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/llmtrace/llmtrace/otelstats"
)

// side is the proxy or the middleware in front of an upstream handler,
// for tests that hold both to the same rules.
type side struct {
	url     string
	stats   func() otelstats.RequestStats // the first finished request's
	root    func(otelstats.RequestStats) sdktrace.ReadOnlySpan
	metrics func() map[string]metricdata.Aggregation
}

// eachSide runs f with the proxy in front of up, then with the middleware
// wrapping it, each recording into a tracker of its own built with opts.
func eachSide(t *testing.T, up http.Handler, opts []otelstats.Option, f func(t *testing.T, s side)) {
	t.Run("proxy", func(t *testing.T) {
		h := newHarness(t, up, nil, opts...)
		f(t, side{url: h.srv.URL,
			stats: func() otelstats.RequestStats { return h.waitStats(1)[0] },
			root: func(s otelstats.RequestStats) sdktrace.ReadOnlySpan {
				return h.spansOf(s.TraceID)["chat m"][0]
			},
			metrics: h.collect})
	})
	t.Run("middleware", func(t *testing.T) {
		x := newH(t, opts...)
		srv, _ := serve(t, x.handler(up, x.tr))
		f(t, side{url: srv.URL,
			stats:   func() otelstats.RequestStats { return x.wait(1)[0] },
			root:    func(otelstats.RequestStats) sdktrace.ReadOnlySpan { return x.span("chat m") },
			metrics: x.metrics})
	})
}

// choiceChunk is a chat chunk of choice idx.
func choiceChunk(idx int, delta map[string]any, finish any) map[string]any {
	return map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m",
		"choices": []any{map[string]any{"index": idx, "delta": delta, "finish_reason": finish}}}
}

// TestClientLeavesAfterFinishReason: a client that stops reading once
// every choice it asked for has its finish reason, before the usage chunk
// and [DONE], got its whole answer: the request ends with that finish
// reason, not as a truncated response. One that leaves while a choice is
// still streaming aborted (SPEC §1), whichever choices had finished.
func TestClientLeavesAfterFinishReason(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    string // the request's n, "" for none
		// head is what the upstream writes before it waits for the
		// client to leave; it then streams stream's chunk until then.
		head   []map[string]any
		stream map[string]any
		want   string
	}{
		{"one choice finished", "", []map[string]any{
			chunk(map[string]any{"content": "a"}, nil), chunk(map[string]any{}, "stop")}, nil, "stop"},
		{"one choice of two finished", "2", []map[string]any{
			choiceChunk(0, map[string]any{"content": "a"}, nil), choiceChunk(1, map[string]any{"content": "b"}, nil),
			choiceChunk(0, map[string]any{}, "stop")}, choiceChunk(1, map[string]any{"content": "x"}, nil), otelstats.FinishAbort},
		{"both choices finished", "2", []map[string]any{
			choiceChunk(0, map[string]any{"content": "a"}, nil), choiceChunk(1, map[string]any{"content": "b"}, nil),
			choiceChunk(1, map[string]any{}, "length"), choiceChunk(0, map[string]any{}, "stop")}, nil, "stop"},
		{"a second choice without n", "", []map[string]any{
			choiceChunk(0, map[string]any{"content": "a"}, nil), choiceChunk(1, map[string]any{"content": "b"}, nil),
			choiceChunk(0, map[string]any{}, "stop")}, choiceChunk(1, map[string]any{"content": "x"}, nil), otelstats.FinishAbort},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gone := make(chan struct{}, 1)
			up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				defer func() { gone <- struct{}{} }()
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "text/event-stream")
				for _, c := range tc.head {
					sseWrite(w, c)
				}
				for deadline := time.After(2 * time.Second); ; {
					select {
					case <-r.Context().Done():
						return
					case <-deadline:
						sseWrite(w, usageChunk(5, 2))
						sseWrite(w, "[DONE]")
						return
					case <-time.After(10 * time.Millisecond):
						if tc.stream != nil {
							sseWrite(w, tc.stream)
						}
					}
				}
			})
			body := `{"model":"m","stream":true,"stream_options":{"include_usage":true}` + map[bool]string{true: `,"n":` + tc.n}[tc.n != ""] + `}`
			eachSide(t, up, nil, func(t *testing.T, sd side) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, sd.url+"/v1/chat/completions", strings.NewReader(body))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				_ = readEvents(resp.Body, func(d string, _ time.Time) {
					if strings.Contains(d, `"finish_reason":"stop"`) {
						cancel() // leaves at the last finish reason (choice 0's)
					}
				})
				resp.Body.Close()
				<-gone
				s := sd.stats()
				wantType := map[bool]string{true: otelstats.FinishAbort}[tc.want == otelstats.FinishAbort]
				if s.FinishReason != tc.want || s.ErrorType != wantType || s.NumOutputTokens < 1 {
					t.Fatalf("finish %q/%q, %d tokens; want %q/%q", s.FinishReason, s.ErrorType, s.NumOutputTokens, tc.want, wantType)
				}
				if wantErr := tc.want == otelstats.FinishAbort; (sd.root(s).Status().Code == codes.Error) != wantErr {
					t.Errorf("root status %v", sd.root(s).Status())
				}
			})
		})
	}
}
