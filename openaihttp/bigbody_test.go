package openaihttp_test

import (
	"context"
	"io"
	"strings"
	"testing"
)

// TestLongResponseKeepsFinishReason: a response in one piece whose choices
// are longer than the layer keeps (a long completion, or logprobs: 4,000
// tokens of top_logprobs pass 1 MiB) still ends with their finish
// reason, not "stop" for want of it.
func TestLongResponseKeepsFinishReason(t *testing.T) {
	lp := `{"token":"x","logprob":-0.5,"bytes":[120],"top_logprobs":[` + strings.Repeat(`{"token":"y","logprob":-1.5,"bytes":[121]},`, 19) +
		`{"token":"z","logprob":-2.5,"bytes":[122]}]}`
	logprobs := `{"content":[` + strings.Repeat(lp+",", 1499) + lp + `]}`
	for _, tc := range []struct {
		name, path, req, body, want string
	}{
		{"chat logprobs", "/v1/chat/completions", `{"model":"m","logprobs":true,"top_logprobs":20}`,
			`{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"` +
				strings.Repeat("x", 1500) + `"},"logprobs":` + logprobs + `,"finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":1500,"total_tokens":1503}}`,
			"length"},
		{"completion text", "/v1/completions", `{"model":"m","prompt":"p"}`,
			`{"id":"c","object":"text_completion","model":"m","choices":[{"text":"` + strings.Repeat("word ", 300_000) +
				`","index":0,"logprobs":null,"finish_reason":"content_filter"}],"usage":{"prompt_tokens":3,"completion_tokens":300000,"total_tokens":300003}}`,
			"content_filter"},
		{"n=2", "/v1/chat/completions", `{"model":"m","n":2}`,
			`{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"content":"` + strings.Repeat("a", 1<<20) +
				`"},"finish_reason":"stop"},{"index":1,"message":{"content":"b"},"finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":9,"total_tokens":12}}`,
			"length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.body) < 1<<20 {
				t.Fatalf("body of %d bytes: not over the layer's limit", len(tc.body))
			}
			h := newHarness(t, rawUpstream("application/json", tc.body[:len(tc.body)/2], tc.body[len(tc.body)/2:]), nil)
			resp := h.post(context.Background(), tc.path, tc.req)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != tc.body {
				t.Fatalf("body changed: %d bytes, want %d", len(b), len(tc.body))
			}
			s := h.waitStats(1)[0]
			if s.FinishReason != tc.want || s.ErrorType != "" || s.NumOutputTokens == 0 || s.NumPromptTokens.N != 3 {
				t.Errorf("finish %q/%q (want %q), %d output tokens, prompt %+v", s.FinishReason, s.ErrorType, tc.want,
					s.NumOutputTokens, s.NumPromptTokens)
			}
		})
	}
}
