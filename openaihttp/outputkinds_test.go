package openaihttp_test

import (
	"context"
	"io"
	"net/http"
	"testing"
)

// rawUpstream answers every request with ctype and the given pieces of
// body, each written and flushed on its own.
func rawUpstream(ctype string, pieces ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", ctype)
		for _, p := range pieces {
			_, _ = io.WriteString(w, p)
			w.(http.Flusher).Flush()
		}
	})
}

func sseBody(events ...string) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = "data: " + e + "\n\n"
	}
	return out
}

// TestStreamUsageWithoutContent: a stream whose usage counts output tokens
// that no chunk showed as text (a model that answered with its stop token
// only: vLLM sends content "" and completion_tokens 1) ends with the
// usage's count, as a response in one piece does, with no token times.
func TestStreamUsageWithoutContent(t *testing.T) {
	for _, tc := range []struct {
		name, path, req string
		events          []string
		want            int
	}{
		{"chat", "/v1/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`, sseBody(
			`{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
			`{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":""},"finish_reason":"stop"}]}`,
			`{"id":"c","object":"chat.completion.chunk","model":"m","choices":[],"usage":{"prompt_tokens":4,"completion_tokens":1,"total_tokens":5}}`,
			`[DONE]`), 1},
		{"responses", "/v1/responses", `{"model":"m","input":"x","stream":true}`, sseBody(
			`{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","status":"in_progress","model":"m","usage":null}}`,
			`{"type":"response.image_generation_call.partial_image","sequence_number":1,"item_id":"ig","output_index":0,"partial_image_index":0,"partial_image_b64":"AAAA"}`,
			`{"type":"response.completed","sequence_number":2,"response":{"id":"resp_1","object":"response","status":"completed","model":"m","usage":{"input_tokens":5,"output_tokens":9,"total_tokens":14}}}`), 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, rawUpstream("text/event-stream", tc.events...), nil)
			resp := h.post(context.Background(), tc.path, tc.req)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			s := h.waitStats(1)[0]
			if s.FinishReason != "stop" || s.NumOutputTokens != tc.want || s.FirstTokenLatency.Valid {
				t.Errorf("finish %q/%q, %d output tokens (want %d), TTFT valid %v", s.FinishReason, s.ErrorType,
					s.NumOutputTokens, tc.want, s.FirstTokenLatency.Valid)
			}
		})
	}
}
