package openaihttp_test

import (
	"context"
	"io"
	"net/http"
	"reflect"
	"testing"
	"time"
	"unsafe"

	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/openaihttp"
	"github.com/llmtrace/llmtrace/otelstats"
)

// skewAnchor moves the tracker's wall anchor by d, as if the wall clock had
// been slewed or stepped by -d since the tracker started (a fresh boot's
// NTP does this): monotonic readings then map onto wall times d apart from
// what time.Time.UnixNano says. The field is unexported; the test fails
// plainly if it is renamed.
func skewAnchor(t *testing.T, tr *otelstats.Tracker, d time.Duration) {
	t.Helper()
	f := reflect.ValueOf(tr).Elem().FieldByName("anchorNs")
	if !f.IsValid() || f.Kind() != reflect.Int64 {
		t.Fatal("otelstats.Tracker has no int64 anchorNs: update skewAnchor")
	}
	p := (*int64)(unsafe.Pointer(f.UnsafeAddr()))
	*p += int64(d)
}

// TestProxySpansOnTrackerTimeline: the proxy's own spans and their events
// sit inside the request's root while the wall clock drifts from the
// monotonic one. The root's times come from the tracker's timeline; the
// proxy's spans once came from wall readings and ended up to half a
// millisecond after their root on a freshly booted CI machine.
func TestProxySpansOnTrackerTimeline(t *testing.T) {
	gaps := []time.Duration{2 * time.Millisecond, 2 * time.Millisecond, 2 * time.Millisecond, 60 * time.Millisecond, 2 * time.Millisecond}
	cases := []struct {
		name string
		body string
		want []string
	}{
		{"stream", `{"model":"m","stream":true}`, []string{"POST", openaihttp.SpanStream, openaihttp.SpanWaitFirstToken}},
		{"one piece", `{"model":"m"}`, []string{"POST", openaihttp.SpanWaitFirstToken}},
	}
	for _, tc := range cases {
		for _, skew := range []time.Duration{-50 * time.Millisecond, 50 * time.Millisecond} {
			t.Run(tc.name+"/"+skew.String(), func(t *testing.T) {
				up := gapsUpstream(gaps)
				if tc.name == "one piece" {
					up = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						time.Sleep(5 * time.Millisecond)
						w.Header().Set("Content-Type", "application/json")
						io.WriteString(w, `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`)
					})
				}
				h := newHarness(t, up, []openaihttp.Option{openaihttp.WithStallPolicy(openaihttp.StallPolicy{Factor: 3, Min: 20 * time.Millisecond, MinGaps: 3})},
					otelstats.WithMaxClockAhead(time.Second))
				skewAnchor(t, h.tr, skew)
				resp := h.post(context.Background(), "/v1/chat/completions", tc.body)
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				s := h.waitStats(1)[0]
				byName := h.spansOf(s.TraceID)
				roots := byName["chat m"]
				if len(roots) != 1 {
					t.Fatalf("spans %v, no one root", keys(byName))
				}
				root := roots[0]
				for _, name := range tc.want {
					sp := byName[name]
					if len(sp) != 1 {
						t.Fatalf("%d %s spans (have %v)", len(sp), name, keys(byName))
					}
					c := sp[0]
					if c.StartTime().Before(root.StartTime()) || c.EndTime().After(root.EndTime()) || c.EndTime().Before(c.StartTime()) {
						t.Errorf("%s [%v, %v] outside the root [%v, %v]", name, c.StartTime(), c.EndTime(), root.StartTime(), root.EndTime())
					}
					for _, e := range c.Events() {
						if e.Time.Before(c.StartTime()) || e.Time.After(c.EndTime()) {
							t.Errorf("%s's %s event at %v outside it [%v, %v]", name, e.Name, e.Time, c.StartTime(), c.EndTime())
						}
					}
					if c.Parent().SpanID() != root.SpanContext().SpanID() || c.SpanKind() == trace.SpanKindServer {
						t.Errorf("%s: parent %v, kind %v", name, c.Parent(), c.SpanKind())
					}
				}
				if tc.name == "stream" && len(byName[openaihttp.SpanStream][0].Events()) == 0 {
					t.Error("no stall event on the stream span: the case checks no event times")
				}
			})
		}
	}
}
