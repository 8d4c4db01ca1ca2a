package openaihttp_test

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/llmtrace/llmtrace/openaihttp"
)

// TestCompressedResponseIsRead: a response in one piece compressed with
// gzip or deflate (a hosted API answering a client that accepts them, as
// the Python SDK does) is read as a plain one: its usage, finish reason
// and id; the client gets the compressed bytes as they came.
func TestCompressedResponseIsRead(t *testing.T) {
	const body = `{"id":"chatcmpl-z","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"length"}],"usage":{"prompt_tokens":6,"completion_tokens":4,"total_tokens":10}}`
	for _, tc := range []struct {
		enc   string
		limit int // WithEventLimit: past it, the body passes unread
	}{{"gzip", 0}, {"deflate", 0}, {"gzip", 64}} {
		enc := tc.enc
		t.Run(enc, func(t *testing.T) {
			var opts []openaihttp.Option
			if tc.limit > 0 {
				opts = append(opts, openaihttp.WithEventLimit(tc.limit))
			}
			var z bytes.Buffer
			var zw io.WriteCloser = gzip.NewWriter(&z)
			if enc == "deflate" {
				zw = zlib.NewWriter(&z)
			}
			_, _ = io.WriteString(zw, body)
			_ = zw.Close()
			h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Content-Encoding", enc)
				b := z.Bytes()
				_, _ = w.Write(b[:len(b)/2])
				w.(http.Flusher).Flush()
				_, _ = w.Write(b[len(b)/2:])
			}), opts)
			resp := h.post(context.Background(), "/v1/chat/completions", `{"model":"m"}`, "Accept-Encoding", enc)
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !bytes.Equal(got, z.Bytes()) {
				t.Fatalf("the client got %d bytes, not the %d compressed ones", len(got), z.Len())
			}
			s := h.waitStats(1)[0]
			if tc.limit > 0 {
				if s.FinishReason != "stop" || s.ErrorType != "" || s.NumOutputTokens != 0 {
					t.Errorf("unread: finish %q/%q, %d output tokens", s.FinishReason, s.ErrorType, s.NumOutputTokens)
				}
				return
			}
			if s.FinishReason != "length" || s.ErrorType != "" || s.NumOutputTokens != 4 || s.NumPromptTokens.N != 6 {
				t.Errorf("finish %q/%q, tokens %+v/%d", s.FinishReason, s.ErrorType, s.NumPromptTokens, s.NumOutputTokens)
			}
			ra := attrMap(h.spansOf(s.TraceID)["chat m"][0].Attributes())
			if ra["gen_ai.response.id"] != "chatcmpl-z" {
				t.Errorf("root %v", ra)
			}
		})
	}
}
