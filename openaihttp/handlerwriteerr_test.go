package openaihttp_test

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"testing"

	"github.com/llmtrace/llmtrace/otelstats"
)

// TestHandlerWriteErrorIsNoAbort: a write the response cannot carry — a
// body after a 204, or past the Content-Length the handler declared — fails
// with net/http's ErrBodyNotAllowed or ErrContentLength. That is the
// handler's slip, and the client, still there, got the whole response: the
// request is not an abort (SPEC §1: abort is the client leaving or a
// cancellation).
func TestHandlerWriteErrorIsNoAbort(t *testing.T) {
	for _, tc := range []struct {
		name  string
		serve func(w http.ResponseWriter) error
	}{
		{"body after 204", func(w http.ResponseWriter) error {
			w.WriteHeader(http.StatusNoContent)
			_, err := io.WriteString(w, "{}\n")
			return err
		}},
		{"past Content-Length", func(w http.ResponseWriter) error {
			body := `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			_, _ = io.WriteString(w, body)
			_, err := io.WriteString(w, "\n")
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newH(t)
			errc := make(chan error, 1)
			up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				errc <- tc.serve(w)
			})
			srv, c := serve(t, x.handler(up, x.tr))
			post(t, c, srv.URL+"/v1/chat/completions", `{"model":"m"}`)
			if err := <-errc; !errors.Is(err, http.ErrBodyNotAllowed) && !errors.Is(err, http.ErrContentLength) {
				t.Fatalf("the handler's write returned %v", err)
			}
			s := x.only()
			if s.FinishReason != otelstats.FinishStop || s.ErrorType != "" {
				t.Errorf("finish %q/%q, want stop", s.FinishReason, s.ErrorType)
			}
		})
	}
}
