package openaihttp_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmtrace/llmtrace/otelstats"
)

// TestLongStreamWaitingForUsageNotAbandoned: a stream whose deliveries
// wait for the final usage (include_usage, the Responses API) is not
// ended as abandoned by the request TTL while its chunks flow.
func TestLongStreamWaitingForUsageNotAbandoned(t *testing.T) {
	for _, tc := range []struct {
		name, path, body string
		content          func(i int) any
		end              []any
	}{
		{"chat include_usage", "/v1/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`,
			func(int) any { return chunk(map[string]any{"content": "a"}, nil) },
			[]any{chunk(map[string]any{}, "stop"), usageChunk(5, 31), "[DONE]"}},
		{"responses", "/v1/responses", `{"model":"m","stream":true,"input":"hi"}`,
			func(int) any { return map[string]any{"type": "response.output_text.delta", "delta": "a"} },
			[]any{map[string]any{"type": "response.completed", "response": map[string]any{"id": "r", "status": "completed", "model": "m",
				"usage": map[string]any{"input_tokens": 5, "output_tokens": 31}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "text/event-stream")
				for i := range 30 {
					sseWrite(w, tc.content(i))
					time.Sleep(50 * time.Millisecond)
				}
				for _, e := range tc.end {
					sseWrite(w, e)
				}
			})
			opts := []otelstats.Option{otelstats.WithRequestTTL(500 * time.Millisecond), otelstats.WithAutoSweep(20 * time.Millisecond)}
			eachSide(t, up, opts, func(t *testing.T, sd side) {
				resp, err := http.Post(sd.url+tc.path, "application/json", strings.NewReader(tc.body))
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				s := sd.stats()
				if s.FinishReason != otelstats.FinishStop || s.NumOutputTokens != 31 {
					t.Errorf("finish %q, %d output tokens; want stop, 31", s.FinishReason, s.NumOutputTokens)
				}
			})
		})
	}
}
