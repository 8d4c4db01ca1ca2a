package openaihttp_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/llmtrace/llmtrace/otelstats"
)

// TestSniffedContentType: a Go server that sets no Content-Type has
// net/http sniff one from the first bytes: text/plain; charset=utf-8 for
// an SSE stream as for JSON. The OpenAI SDKs read a stream request's body
// as SSE whatever its Content-Type says, and so does the layer: behind
// the middleware (which sees the handler's empty Content-Type) as behind
// the proxy (which sees the sniffed one) — the same server is traced
// alike, its tokens, TTFT and finish reason read. A request not
// streamed is read as JSON.
func TestSniffedContentType(t *testing.T) {
	for _, tc := range []struct {
		name, req, body string
		ttft            bool
	}{
		{"stream", `{"model":"m","stream":true}`, strings.Join(sseBody(
			`{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}`,
			`{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"b"},"finish_reason":"length"}]}`,
			`[DONE]`), ""), true},
		{"json", `{"model":"m"}`, `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ab"},"finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`, false},
	} {
		up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			_, _ = io.WriteString(w, tc.body) // no Content-Type: net/http sniffs text/plain
		})
		t.Run(tc.name, func(t *testing.T) {
			eachSide(t, up, nil, func(t *testing.T, s side) {
				resp, _ := post(t, http.DefaultClient, s.url+"/v1/chat/completions", tc.req)
				if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
					t.Fatalf("client got Content-Type %q", ct)
				}
				st := s.stats()
				if st.FinishReason != "length" || st.ErrorType != "" || st.NumOutputTokens != 2 || st.FirstTokenLatency.Valid != tc.ttft {
					t.Errorf("finish %q/%q, %d output tokens, TTFT %v; want length, 2 tokens, TTFT %v", st.FinishReason, st.ErrorType,
						st.NumOutputTokens, st.FirstTokenLatency.Valid, tc.ttft)
				}
				_ = otelstats.FinishStop
			})
		})
	}
}
