package openaihttp_test

import (
	"context"
	"io"
	"testing"
)

// TestStreamLastLineWithoutNewline: a stream whose last line has no line
// end (a server that writes "data: [DONE]" and closes) ended with it, as
// one whose last event lacks only its blank line does: it is not cut short.
func TestStreamLastLineWithoutNewline(t *testing.T) {
	const content = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"},\"finish_reason\":\"stop\"}]}\n\n"
	for _, tail := range []string{"data: [DONE]\n", "data: [DONE]", "data:[DONE]"} {
		h := newHarness(t, rawUpstream("text/event-stream", content, tail), nil)
		resp := h.post(context.Background(), "/v1/chat/completions", `{"model":"m","stream":true}`)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if s := h.waitStats(1)[0]; s.FinishReason != "stop" || s.NumOutputTokens != 1 {
			t.Errorf("ending %q: finish %q/%q, %d output tokens", tail, s.FinishReason, s.ErrorType, s.NumOutputTokens)
		}
	}
}
