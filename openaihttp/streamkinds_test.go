package openaihttp_test

import (
	"context"
	"io"
	"testing"

	"github.com/llmtrace/llmtrace/openaihttp"
)

// TestStreamOutputKinds: every kind of generated output a stream carries
// is a delivery — the first token time, a token at least — whatever the
// field it comes in: chat audio (transcript or data, not the id or expiry
// alone), and the Responses API's tool inputs besides function arguments.
func TestStreamOutputKinds(t *testing.T) {
	chat := func(delta string) string {
		return `{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":` + delta + `,"finish_reason":null}]}`
	}
	resp := func(typ string) string {
		return `{"type":"` + typ + `","sequence_number":1,"item_id":"it","output_index":0,"delta":"ab"}`
	}
	const completed = `{"type":"response.completed","sequence_number":9,"response":{"id":"r","object":"response","status":"completed","model":"m","usage":{"input_tokens":5,"output_tokens":2,"total_tokens":7}}}`
	for _, tc := range []struct {
		name, path, req string
		events          []string
		chunks          int // content chunks
	}{
		{"chat audio", "/v1/chat/completions", `{"model":"m","stream":true}`, sseBody(
			chat(`{"role":"assistant","content":null,"audio":{"id":"audio_1"}}`),
			chat(`{"audio":{"transcript":"Hel"}}`),
			chat(`{"audio":{"data":"UklGRg=="}}`),
			chat(`{"audio":{"expires_at":1700000000}}`),
			`{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
			`[DONE]`), 2},
		{"custom tool input", "/v1/responses", `{"model":"m","input":"x","stream":true}`, sseBody(resp("response.custom_tool_call_input.delta"), completed), 1},
		{"mcp arguments", "/v1/responses", `{"model":"m","input":"x","stream":true}`, sseBody(resp("response.mcp_call_arguments.delta"), completed), 1},
		{"code interpreter code", "/v1/responses", `{"model":"m","input":"x","stream":true}`, sseBody(resp("response.code_interpreter_call_code.delta"), completed), 1},
		{"shell command", "/v1/responses", `{"model":"m","input":"x","stream":true}`, sseBody(resp("response.shell_call_command.delta"), completed), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, rawUpstream("text/event-stream", tc.events...), nil)
			r := h.post(context.Background(), tc.path, tc.req)
			_, _ = io.Copy(io.Discard, r.Body)
			r.Body.Close()
			s := h.waitStats(1)[0]
			if s.FinishReason != "stop" || !s.FirstTokenLatency.Valid || s.NumOutputTokens < tc.chunks {
				t.Fatalf("finish %q/%q, %d output tokens, TTFT valid %v", s.FinishReason, s.ErrorType, s.NumOutputTokens, s.FirstTokenLatency.Valid)
			}
			st := h.spansOf(s.TraceID)[openaihttp.SpanStream]
			if len(st) != 1 {
				t.Fatalf("%d stream spans", len(st))
			}
			if got := attrMap(st[0].Attributes())[string(openaihttp.AttrContentChunks)]; got != int64(tc.chunks) {
				t.Errorf("content chunks %v, want %d", got, tc.chunks)
			}
		})
	}
}
