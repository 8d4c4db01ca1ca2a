package openaihttp_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/llmtrace/llmtrace/openaihttp"
	"github.com/llmtrace/llmtrace/otelstats"
)

// TestProxyCancelledCallIsNoUpstreamError: when the client leaves, the
// proxy cancels its upstream call, and the read of the upstream's body
// fails. That failure is the proxy's own doing, not the upstream's: the
// upstream call (the POST span, llm.proxy.stream and
// http.client.request.duration) must not say upstream_error, which names
// an engine that broke. A client leaving mid-stream makes the call an
// abort, as the request is; one that leaves once it has everything
// ([DONE]) while the upstream holds its body open leaves a call that did
// not fail at all. A real upstream failure mid-stream stays upstream_error
// (TestProxyUpstreamDiesMidStream).
func TestProxyCancelledCallIsNoUpstreamError(t *testing.T) {
	for _, tc := range []struct {
		name       string
		done       bool   // the upstream sends the finish and [DONE], then holds its body open
		headless   bool   // the upstream answers nothing: the client leaves before its headers
		finish     string // the request's
		callErr    string // the upstream call's error.type
		streamCode codes.Code
	}{
		{"mid-stream", false, false, otelstats.FinishAbort, otelstats.FinishAbort, codes.Error},
		{"after-done", true, false, otelstats.FinishStop, "", codes.Unset},
		{"before-headers", false, true, otelstats.FinishAbort, otelstats.FinishAbort, codes.Unset},
	} {
		t.Run(tc.name, func(t *testing.T) {
			upGone := make(chan struct{})
			reached := make(chan struct{})
			up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				defer close(upGone)
				if tc.headless {
					_, _ = io.Copy(io.Discard, r.Body) // else its server cannot see the proxy leave
					close(reached)
					<-r.Context().Done()
					return
				}
				w.Header().Set("Content-Type", "text/event-stream")
				for i := 0; ; i++ {
					if tc.done && i == 3 {
						sseWrite(w, chunk(map[string]any{"content": "x"}, "stop"))
						sseWrite(w, "[DONE]")
						<-r.Context().Done()
						return
					}
					sseWrite(w, chunk(map[string]any{"content": "x"}, nil))
					select {
					case <-r.Context().Done():
						return
					case <-time.After(5 * time.Millisecond):
					}
				}
			})
			h := newHarness(t, up, nil)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.headless {
				go func() {
					<-reached
					cancel()
				}()
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.srv.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true}`))
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
					t.Fatal("the client got a response")
				}
			} else {
				resp := h.post(ctx, "/v1/chat/completions", `{"model":"m","stream":true}`)
				n := 0
				_ = readEvents(resp.Body, func(data string, _ time.Time) {
					if n++; (!tc.done && n == 3) || strings.Contains(data, "[DONE]") {
						cancel()
					}
				})
				resp.Body.Close()
			}
			<-upGone
			s := h.waitStats(1)[0]
			if s.FinishReason != tc.finish {
				t.Fatalf("finish %q/%q, want %q", s.FinishReason, s.ErrorType, tc.finish)
			}
			sp := h.spansOf(s.TraceID)
			post := sp["POST"]
			if len(post) != 1 {
				t.Fatalf("POST spans %d", len(post))
			}
			if v, _ := attr(post[0], "error.type"); v.AsString() != tc.callErr {
				t.Errorf("POST error.type %q, want %q", v.AsString(), tc.callErr)
			}
			if st := sp[openaihttp.SpanStream]; tc.headless != (len(st) == 0) || len(st) > 0 && st[0].Status().Code != tc.streamCode {
				t.Errorf("%s: %d spans (%v), want status %v", openaihttp.SpanStream, len(st), statuses(st), tc.streamCode)
			}
			pts := histPoints(t, h.collect(), "http.client.request.duration")
			if len(pts) != 1 {
				t.Fatalf("http.client.request.duration %d points", len(pts))
			}
			if v, _ := pts[0].Attributes.Value(attribute.Key("error.type")); v.AsString() != tc.callErr {
				t.Errorf("http.client.request.duration error.type %q, want %q", v.AsString(), tc.callErr)
			}
		})
	}
}

func statuses(s []sdktrace.ReadOnlySpan) []sdktrace.Status {
	var out []sdktrace.Status
	for _, x := range s {
		out = append(out, x.Status())
	}
	return out
}
