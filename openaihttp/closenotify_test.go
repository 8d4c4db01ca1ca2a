package openaihttp_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// closeNotifier is http.CloseNotifier, deprecated but still asserted by
// gin's Context.Stream, which Ollama's server streams with.
type closeNotifier interface{ CloseNotify() <-chan bool }

// ginStream streams as gin's Context.Stream does: it asserts that the
// writer is a CloseNotifier (a panic when it is not: ollama/ollama#9402
// fixed that very panic in a writer of its own) and stops when the
// channel says the client went away.
func ginStream(events []string, gap time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		clientGone := w.(closeNotifier).CloseNotify()
		for _, ev := range events {
			select {
			case <-clientGone:
				return
			case <-time.After(gap):
			}
			fmt.Fprintf(w, "data: %s\n\n", ev)
			w.(http.Flusher).Flush()
		}
	})
}

// TestMiddlewareCloseNotifier: a gin handler behind the middleware streams
// as it does without it — no panic — and learns through CloseNotify that
// its client left, which then ends as an abort.
func TestMiddlewareCloseNotifier(t *testing.T) {
	t.Run("served", func(t *testing.T) {
		x := newH(t)
		srv, c := serve(t, x.handler(ginStream(chatStream([]string{"a", "b"}, "stop", ""), 0), x.tr))
		resp, body := post(t, c, srv.URL+"/v1/chat/completions", `{"model":"m","stream":true}`)
		if resp.StatusCode != http.StatusOK || len(sseData(body)) != 5 {
			t.Fatalf("status %d, body %q", resp.StatusCode, body)
		}
		if s := x.only(); s.FinishReason != "stop" || s.NumOutputTokens != 2 {
			t.Errorf("finish %q/%q, %d output tokens", s.FinishReason, s.ErrorType, s.NumOutputTokens)
		}
	})
	t.Run("client left", func(t *testing.T) {
		x := newH(t)
		words := make([]string, 200)
		for i := range words {
			words[i] = "w"
		}
		srv, c := serve(t, x.handler(ginStream(chatStream(words, "stop", ""), 5*time.Millisecond), x.tr))
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true}`))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		for range 3 {
			if _, err := br.ReadString('\n'); err != nil {
				t.Fatal(err)
			}
		}
		cancel()
		resp.Body.Close()
		if s := x.only(); s.FinishReason != "abort" {
			t.Errorf("finish %q/%q, want abort", s.FinishReason, s.ErrorType)
		}
	})
}
