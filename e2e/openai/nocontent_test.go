package openai_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/llmtrace/llmtrace/openaihttp"
	"github.com/llmtrace/llmtrace/otelstats"
)

// TestSDKStreamAnsweredNoContent: a stream request answered 204 is, to
// the official SDK, an empty stream that ended without error; the proxy
// traces it as whole (stop, no output), not as a truncated stream.
func TestSDKStreamAnsweredNoContent(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	fin := make(chan otelstats.RequestStats, 1)
	tr, err := otelstats.NewTracker(otelstats.WithAutoSweep(100*time.Millisecond),
		otelstats.WithOnFinish(func(st *otelstats.RequestStats) { fin <- *st }))
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(up.URL)
	p, err := openaihttp.NewProxy(u, tr)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	hc := srv.Client()
	t.Cleanup(func() {
		hc.CloseIdleConnections()
		srv.Close()
		p.CloseIdleConnections()
		up.Close()
		_ = tr.Shutdown(context.Background())
	})
	c := openai.NewClient(option.WithBaseURL(srv.URL+"/v1"), option.WithAPIKey("test"), option.WithHTTPClient(hc), option.WithMaxRetries(0))
	st := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: "gpt-x",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	n := 0
	for st.Next() {
		n++
	}
	if err := st.Err(); err != nil || n != 0 {
		t.Fatalf("SDK read %d chunks, err %v: want an empty stream without error", n, err)
	}
	_ = st.Close()
	select {
	case s := <-fin:
		if s.FinishReason != otelstats.FinishStop || s.ErrorType != "" || s.NumOutputTokens != 0 {
			t.Errorf("finish %q/%q, %d output tokens; want stop, no error", s.FinishReason, s.ErrorType, s.NumOutputTokens)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no request finished")
	}
}
