package openaihttp_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/llmtrace/llmtrace/openaihttp"
)

// TestProxyStreamEndsBeforeDone: an upstream whose stream ends cleanly
// (the chunked body's end) without [DONE], or with an error event, is a
// truncated stream or a stream error every time, never an abort: the client
// read the whole body (the issue: 8 of 60 were aborts).
func TestProxyStreamEndsBeforeDone(t *testing.T) {
	for _, c := range []struct {
		name, tail, errType string
	}{
		{"no [DONE]", "", openaihttp.ErrorTruncated},
		{"error event", "event: error\ndata: {\"error\":{\"message\":\"boom\"}}\n\n", openaihttp.ErrorStream},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				for range 3 {
					io.WriteString(w, "data: "+`{"id":"x","choices":[{"delta":{"content":"ok"}}]}`+"\n\n")
				}
				io.WriteString(w, c.tail)
			}), nil)
			// The upstream's small body gets a Content-Length, which the
			// proxy passes on: a client that closes its connection as
			// soon as it has the last byte, as curl does, may be gone
			// before the proxy's handler returns.
			client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			const n = 40
			for range n {
				resp, err := client.Post(h.srv.URL+"/v1/chat/completions", "application/json",
					strings.NewReader(`{"model":"m","stream":true}`))
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			for i, s := range h.waitStats(n) {
				if s.FinishReason != "error" || s.ErrorType != c.errType {
					t.Fatalf("request %d: finish %q/%q, want error/%q", i, s.FinishReason, s.ErrorType, c.errType)
				}
			}
		})
	}
}
