package openaihttp_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmtrace/llmtrace/otelstats"
)

// TestMiddlewareWithEngineFinishingFirst: the middleware shares its
// tracker with the server's own engine loop, which ends a request before
// the handler has written its response. The handler's response — here a
// 500 — still decides the request's end: the middleware's arrival says a
// frontend will finish it, so the engine's FINISHED waits for it (SPEC §1)
// instead of ending it and having the middleware's rejected.
func TestMiddlewareWithEngineFinishingFirst(t *testing.T) {
	x := newH(t, otelstats.WithFrontendGrace(2*time.Second))
	engine := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		q := otelstats.RequestFromContext(r.Context())
		now := time.Now()
		for _, u := range []otelstats.Update{
			{Kind: otelstats.KindQueued, Time: now},
			{Kind: otelstats.KindPrefilling, Time: now.Add(time.Millisecond), NumComputedTokens: 7},
			{Kind: otelstats.KindDecoding, Time: now.Add(2 * time.Millisecond), NumNewTokens: 1},
			{Kind: otelstats.KindFinished, Time: now.Add(2 * time.Millisecond), Side: otelstats.SideEngine, FinishReason: "stop"},
		} {
			if err := q.Record(u); err != nil {
				t.Errorf("engine %v: %v", u.Kind, err)
			}
		}
		time.Sleep(5 * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, `{"error":{"message":"boom"}}`)
	})
	srv, _ := serve(t, x.handler(engine, x.tr))
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	s := x.wait(1)[0]
	if s.FinishReason != otelstats.FinishError || s.ErrorType != "500" {
		t.Errorf("reason %q error.type %q, want error, 500 (the response the client got)", s.FinishReason, s.ErrorType)
	}
	if !s.E2ELatency.Valid || s.E2ELatency.Value < 5*time.Millisecond {
		t.Errorf("e2e %v, want to the handler's response (≥ 5 ms), not the engine's FINISHED", s.E2ELatency)
	}
}
