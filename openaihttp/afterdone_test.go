package openaihttp_test

import (
	"context"
	"io"
	"testing"
)

// TestStreamEndsAtDone: the OpenAI SDKs (Python and Node) stop reading a
// stream's events at [DONE]; what a broken upstream sends after it —
// content, an error, a second [DONE] — never reaches the caller, and so is
// neither output nor a failure on the trace.
func TestStreamEndsAtDone(t *testing.T) {
	const (
		content = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"},\"finish_reason\":\"stop\"}]}\n\n"
		done    = "data: [DONE]\n\n"
	)
	for _, tc := range []struct {
		name  string
		after []string
	}{
		{"done twice", []string{done}},
		{"content", []string{"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\"}}]}\n\n"}},
		{"error data", []string{"data: {\"error\":{\"message\":\"late\"}}\n\n"}},
		{"error field", []string{"error: {\"message\":\"late\"}\n\n"}},
		{"event error", []string{"event: error\ndata: {\"message\":\"late\"}\n\n"}},
		{"same write", []string{content + "data: {\"error\":{}}\n\n"}},
		{"no blank line", []string{"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\"}}]}\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, rawUpstream("text/event-stream", append([]string{content, done}, tc.after...)...), nil)
			resp := h.post(context.Background(), "/v1/chat/completions", `{"model":"m","stream":true}`)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if s := h.waitStats(1)[0]; s.FinishReason != "stop" || s.ErrorType != "" || s.NumOutputTokens != 1 {
				t.Errorf("finish %q/%q, %d output tokens; want stop, 1", s.FinishReason, s.ErrorType, s.NumOutputTokens)
			}
		})
	}
}
