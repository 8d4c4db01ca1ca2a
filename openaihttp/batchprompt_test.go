package openaihttp_test

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/llmtrace/llmtrace/openaihttp"
	"github.com/llmtrace/llmtrace/otelstats"
)

// TestBatchPromptChoices: a completion whose prompt is a batch (an array
// of strings or of token arrays) streams a choice per prompt and per n,
// indexed prompt × n + choice (vLLM's serving_completion, OpenAI's API):
// the stream is whole when every one of them has its finish reason, not
// when the first prompt's has. A stream cut after the first prompt
// finished, before the second began (it waited in the scheduler's queue),
// is truncated.
func TestBatchPromptChoices(t *testing.T) {
	choice := func(i int, text, finish string) string {
		return `{"id":"cmpl-1","object":"text_completion","model":"m","choices":[{"index":` + strconv.Itoa(i) +
			`,"text":"` + text + `","logprobs":null,"finish_reason":` + finish + `}]}`
	}
	for _, tc := range []struct {
		name, prompt, n string
		events          []string
		reason, errType string
	}{
		{"two prompts, cut after the first", `["a","b"]`, "", []string{choice(0, "x", "null"), choice(0, "y", `"length"`)},
			otelstats.FinishError, openaihttp.ErrorTruncated},
		{"two prompts, both finished", `["a","b"]`, "", []string{choice(0, "x", `"length"`), choice(1, "y", `"stop"`)}, "stop", ""},
		{"token-array prompts, cut after the first", `[[1,2],[3]]`, "", []string{choice(0, "x", `"stop"`)},
			otelstats.FinishError, openaihttp.ErrorTruncated},
		{"two prompts of two choices, three finished", ` [ "a" , "b" ] `, `,"n":2`, []string{
			choice(0, "x", `"stop"`), choice(1, "x", `"stop"`), choice(2, "x", `"stop"`)},
			otelstats.FinishError, openaihttp.ErrorTruncated},
		{"one prompt of tokens", `[1,2,3]`, "", []string{choice(0, "x", `"length"`)}, "length", ""},
		{"one prompt in an array", `["a"]`, "", []string{choice(0, "x", `"length"`)}, "length", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachSide(t, rawUpstream("text/event-stream", sseBody(tc.events...)...), nil, func(t *testing.T, s side) {
				resp, err := http.Post(s.url+"/v1/completions", "application/json",
					strings.NewReader(`{"model":"m","prompt":`+tc.prompt+tc.n+`,"stream":true}`))
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if st := s.stats(); st.FinishReason != tc.reason || st.ErrorType != tc.errType {
					t.Errorf("finish %q, error %q; want %q, %q", st.FinishReason, st.ErrorType, tc.reason, tc.errType)
				}
			})
		})
	}
}
