package openaihttp_test

import (
	"testing"

	"github.com/llmtrace/llmtrace/openaihttp"
)

// TestStreamWithoutDone: TGI before 2.2 (its PR #2221 added [DONE] in July
// 2024), ik_llama.cpp and other servers end a stream without [DONE], and
// the OpenAI SDKs, which need none, give the client the whole answer. A
// stream whose every choice has its finish reason, then ends cleanly, is
// whole: its finish reason, not response_truncated. One that ends while
// a choice still streams is cut short.
func TestStreamWithoutDone(t *testing.T) {
	const chat, req = "/v1/chat/completions", `{"model":"m","stream":true}`
	checkStreamEnds(t, []streamEnd{
		{"TGI 2.0 chat", chat, req, []string{
			sseChunk("0", `{"role":"assistant","content":"Hi"}`, "null"),
			sseChunk("0", `{"role":"assistant","content":" there"}`, `"length"`)}, "length", "", 2},
		{"text completion", "/v1/completions", `{"model":"m","prompt":"x","stream":true}`, []string{
			`data: {"id":"","object":"text_completion","model":"m","choices":[{"index":0,"text":"a","logprobs":null,"finish_reason":null}]}` + "\n\n",
			`data: {"id":"","object":"text_completion","model":"m","choices":[{"index":0,"text":"b","logprobs":null,"finish_reason":"stop"}]}` + "\n\n"}, "stop", "", 2},
		{"include_usage, usage never came", chat, `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`, []string{
			sseChunk("0", `{"content":"a"}`, "null"), sseChunk("0", `{}`, `"stop"`)}, "stop", "", 1},
		{"n=2, both finished", chat, `{"model":"m","stream":true,"n":2}`, []string{
			sseChunk("0", `{"content":"a"}`, "null"), sseChunk("1", `{"content":"b"}`, "null"),
			sseChunk("0", `{}`, `"stop"`), sseChunk("1", `{}`, `"length"`)}, "length", "", 2},
		{"n=2, one still streaming", chat, `{"model":"m","stream":true,"n":2}`, []string{
			sseChunk("0", `{"content":"a"}`, "null"), sseChunk("1", `{"content":"b"}`, "null"),
			sseChunk("0", `{}`, `"stop"`)}, "error", openaihttp.ErrorTruncated, 2},
		{"no finish reason", chat, req, []string{
			sseChunk("0", `{"content":"a"}`, "null")}, "error", openaihttp.ErrorTruncated, 1},
		{"Responses API without its final event", "/v1/responses", `{"model":"m","input":"x","stream":true}`, []string{
			"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"a\"}\n\n"}, "error", openaihttp.ErrorTruncated, 1},
	})
}
