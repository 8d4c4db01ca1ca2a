package openaihttp_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestEchoWithoutOutput: /v1/completions with echo and max_tokens 0
// (prompt scoring) streams the prompt back as the choice's text and
// generates nothing — vLLM's serving_completion sends the prompt text,
// then a usage of completion_tokens 0. The echoed text is no output: no
// token, no TTFT (SPEC §2), where the layer recorded one token at the
// echo's time. A stream of Ollama's all-zero placeholder usages cut
// before its real usage still keeps the text it delivered.
func TestEchoWithoutOutput(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events []string
		out    int
		ttft   bool
	}{
		{"echo, max_tokens 0", []string{
			`{"id":"cmpl-1","object":"text_completion","model":"m","choices":[{"index":0,"text":"Paris is the capital","logprobs":null,"finish_reason":"length"}]}`,
			`{"id":"cmpl-1","object":"text_completion","model":"m","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":0,"total_tokens":5}}`,
			"[DONE]"}, 0, false},
		{"placeholder usages, cut", []string{
			`{"id":"cmpl-1","object":"text_completion","choices":[{"text":"a","index":0,"finish_reason":null}],"model":"m","usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}}`,
			`{"id":"cmpl-1","object":"text_completion","choices":[{"text":"b","index":0,"finish_reason":"stop"}],"model":"m","usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}}`},
			2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachSide(t, rawUpstream("text/event-stream", sseBody(tc.events...)...), nil, func(t *testing.T, s side) {
				resp, err := http.Post(s.url+"/v1/completions", "application/json", strings.NewReader(
					`{"model":"m","prompt":"Paris is the capital","echo":true,"max_tokens":0,"logprobs":1,"stream":true,"stream_options":{"include_usage":true}}`))
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				st := s.stats()
				if st.NumOutputTokens != tc.out || st.FirstTokenLatency.Valid != tc.ttft || st.TimePerOutputToken.Valid && !tc.ttft {
					t.Errorf("%d output tokens, TTFT %+v, TPOT %+v; want %d tokens, TTFT %v", st.NumOutputTokens,
						st.FirstTokenLatency, st.TimePerOutputToken, tc.out, tc.ttft)
				}
			})
		})
	}
}
