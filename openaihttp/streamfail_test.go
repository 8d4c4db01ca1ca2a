package openaihttp_test

import (
	"context"
	"io"
	"testing"

	"github.com/llmtrace/llmtrace/openaihttp"
)

// sseChunk is one chat chunk event of choice index.
func sseChunk(index, delta, finish string) string {
	return "data: " + `{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":` + index +
		`,"delta":` + delta + `,"finish_reason":` + finish + `}]}` + "\n\n"
}

// streamEnd is how one stream, as a server writes it, must end.
type streamEnd struct {
	name, path, req string
	pieces          []string
	reason, errType string
	out             int
}

// checkStreamEnds sends each stream through the proxy and the middleware
// and checks how its request ended.
func checkStreamEnds(t *testing.T, cases []streamEnd) {
	for _, tc := range cases {
		want := func(t *testing.T, reason, errType string, out int) {
			t.Helper()
			if reason != tc.reason || errType != tc.errType || out != tc.out {
				t.Errorf("finish %q/%q, %d output tokens; want %q/%q, %d", reason, errType, out, tc.reason, tc.errType, tc.out)
			}
		}
		t.Run("proxy/"+tc.name, func(t *testing.T) {
			h := newHarness(t, rawUpstream("text/event-stream", tc.pieces...), nil)
			resp := h.post(context.Background(), tc.path, tc.req)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			s := h.waitStats(1)[0]
			want(t, s.FinishReason, s.ErrorType, s.NumOutputTokens)
		})
		t.Run("middleware/"+tc.name, func(t *testing.T) {
			x := newH(t)
			srv, c := serve(t, x.handler(rawUpstream("text/event-stream", tc.pieces...), x.tr))
			post(t, c, srv.URL+tc.path, tc.req)
			s := x.only()
			want(t, s.FinishReason, s.ErrorType, s.NumOutputTokens)
		})
	}
}

// TestStreamErrorFields: llama.cpp's server (before its errors became
// `data: {"error":…}`, still in wide use) reports a failure mid-stream as an
// `error:` field line — not a data line, so no SDK parses it — and then
// writes `data: [DONE]` all the same: a stream error, not "stop". An event
// whose type is error is one too, whatever its data says.
func TestStreamErrorFields(t *testing.T) {
	const chat, req = "/v1/chat/completions", `{"model":"m","stream":true}`
	checkStreamEnds(t, []streamEnd{
		{"llama.cpp error field, then [DONE]", chat, req, []string{
			sseChunk("0", `{"role":"assistant","content":null}`, "null"),
			sseChunk("0", `{"content":"Hi"}`, "null"),
			`error: {"code":500,"message":"the request exceeds the available context size","type":"exceed_context_size_error"}` + "\n\n",
			"data: [DONE]\n\n"}, "error", openaihttp.ErrorStream, 1},
		{"llama.cpp error field, CRLF, last", chat, req, []string{
			sseChunk("0", `{"content":"Hi"}`, "null"),
			"error: {\"code\":500,\"message\":\"boom\",\"type\":\"server_error\"}\r\n"}, "error", openaihttp.ErrorStream, 1},
		{"event type error without an error object", chat, req, []string{
			sseChunk("0", `{"content":"Hi"}`, "null"),
			"event: error\ndata: {\"message\":\"CUDA out of memory\"}\n\n",
			"data: [DONE]\n\n"}, "error", openaihttp.ErrorStream, 1},
		{"other event types are no error", chat, req, []string{
			"event: message\nid: 1\nerrors: 0\n" + sseChunk("0", `{"content":"Hi"}`, `"stop"`),
			"data: [DONE]\n\n"}, "stop", "", 1},
	})
}
