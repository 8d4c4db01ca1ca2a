package openaihttp_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestPlaceholderUsage: Ollama's /v1/completions, asked for
// stream_options.include_usage, puts a zero usage on every chunk
// ("usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0},
// middleware/openai.go's CompleteWriter) and the real one on its last,
// choices-less chunk. A prompt of no tokens is no prompt's size: the
// request's prompt tokens are the final usage's, not the placeholder's 0.
func TestPlaceholderUsage(t *testing.T) {
	chunk := func(text, finish string) string {
		return `{"id":"cmpl-1","object":"text_completion","created":1,"choices":[{"text":"` + text + `","index":0,"finish_reason":` + finish +
			`}],"model":"m","system_fingerprint":"fp_ollama","usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}}`
	}
	up := rawUpstream("text/event-stream", sseBody(chunk("a", "null"), chunk("b", "null"), chunk("", `"stop"`),
		`{"id":"cmpl-1","object":"text_completion","created":1,"choices":[],"model":"m","system_fingerprint":"fp_ollama",`+
			`"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}`, "[DONE]")...)
	eachSide(t, up, nil, func(t *testing.T, s side) {
		resp, err := http.Post(s.url+"/v1/completions", "application/json",
			strings.NewReader(`{"model":"m","prompt":"hi","stream":true,"stream_options":{"include_usage":true}}`))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		st := s.stats()
		if !st.NumPromptTokens.Valid || st.NumPromptTokens.N != 12 || st.NumOutputTokens != 3 || st.FinishReason != "stop" {
			t.Errorf("prompt %+v, output %d, finish %q; want 12 prompt and 3 output tokens from the final usage, stop",
				st.NumPromptTokens, st.NumOutputTokens, st.FinishReason)
		}
		if !st.FirstTokenLatency.Valid {
			t.Error("no TTFT: the chunks' text was delivered")
		}
	})
}
