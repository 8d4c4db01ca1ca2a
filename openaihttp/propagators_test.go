package openaihttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"

	"go.opentelemetry.io/contrib/propagators/b3"
	"go.opentelemetry.io/contrib/propagators/jaeger"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/openaihttp"
	"github.com/llmtrace/llmtrace/otelstats"
)

// TestProxyUntrustedDebugFlag: with B3 or Jaeger propagation
// (OTEL_PROPAGATORS), an untrusted caller's debug flag decides nothing
// upstream, as its sampled flag does not: the trace is dropped here, and
// the upstream is told so, not told to sample by the caller's
// X-B3-Flags, b3's "d" or uber-trace-id's debug bit. A trusted caller's
// debug flag still decides.
func TestProxyUntrustedDebugFlag(t *testing.T) {
	const tid, sid = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	for _, tc := range []struct {
		name    string
		prop    propagation.TextMapPropagator
		trusted bool
		hdr     []string
	}{
		{"b3multi", b3.New(b3.WithInjectEncoding(b3.B3MultipleHeader)), false, []string{"X-B3-TraceId", tid, "X-B3-SpanId", sid, "X-B3-Flags", "1"}},
		{"b3", b3.New(), false, []string{"b3", tid + "-" + sid + "-d"}},
		{"jaeger", jaeger.Jaeger{}, false, []string{"uber-trace-id", tid + ":" + sid + ":0:3"}},
		// A trusted caller's debug flag samples, here and upstream.
		{"b3, trusted", b3.New(), true, []string{"b3", tid + "-" + sid + "-d"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var told []bool
			stream := streamOf("a")
			up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				sc := trace.SpanContextFromContext(tc.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
				mu.Lock()
				told = append(told, sc.IsSampled())
				mu.Unlock()
				stream.ServeHTTP(w, r)
			})
			h := newHarness(t, up, []openaihttp.Option{openaihttp.WithPropagators(tc.prop), openaihttp.WithTrustIncomingSampling(tc.trusted)},
				otelstats.WithHeadSampler(sdktrace.ParentBased(sdktrace.NeverSample())))
			resp := h.post(context.Background(), "/v1/chat/completions", proxyChatBody, tc.hdr...)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			s := h.waitStats(1)[0]
			mu.Lock()
			defer mu.Unlock()
			if len(told) != 1 || told[0] != s.Sampled || s.Sampled != tc.trusted {
				t.Errorf("the upstream was told sampled %v, the trace kept: %v (%s)", told, s.Sampled, s.SamplingReason)
			}
		})
	}
}

// TestProxyClearsCallersB3Headers: the B3 headers a caller sent that the
// proxy's propagator does not write itself (X-B3-ParentSpanId, which B3
// does not list; the multi headers beside a single-header b3) do not reach
// the upstream beside the proxy's own, whatever the trust.
func TestProxyClearsCallersB3Headers(t *testing.T) {
	const tid, sid, psid = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", "1111111111111111"
	for _, tc := range []struct {
		name string
		prop propagation.TextMapPropagator
		hdr  []string
		gone []string // headers the upstream must not get
	}{
		{"b3multi, parent span id", b3.New(b3.WithInjectEncoding(b3.B3MultipleHeader)),
			[]string{"X-B3-TraceId", tid, "X-B3-SpanId", sid, "X-B3-ParentSpanId", psid, "X-B3-Sampled", "1"}, []string{"X-B3-ParentSpanId"}},
		{"b3 single, caller's multi headers", b3.New(b3.WithInjectEncoding(b3.B3SingleHeader)),
			[]string{"X-B3-TraceId", tid, "X-B3-SpanId", sid, "X-B3-ParentSpanId", psid, "X-B3-Flags", "1"},
			[]string{"X-B3-TraceId", "X-B3-SpanId", "X-B3-ParentSpanId", "X-B3-Flags"}},
		{"tracecontext and b3", propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, b3.New()),
			[]string{"b3", tid + "-" + sid + "-1-" + psid, "X-B3-ParentSpanId", psid}, []string{"X-B3-ParentSpanId"}},
	} {
		for _, trusted := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/trusted=%v", tc.name, trusted), func(t *testing.T) {
				var mu sync.Mutex
				var got http.Header
				stream := streamOf("a")
				up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					mu.Lock()
					got = r.Header.Clone()
					mu.Unlock()
					stream.ServeHTTP(w, r)
				})
				h := newHarness(t, up, []openaihttp.Option{openaihttp.WithPropagators(tc.prop), openaihttp.WithTrustIncomingSampling(trusted)})
				resp := h.post(context.Background(), "/v1/chat/completions", proxyChatBody, tc.hdr...)
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				h.waitStats(1)
				mu.Lock()
				defer mu.Unlock()
				for _, k := range tc.gone {
					if v := got.Values(k); len(v) > 0 {
						t.Errorf("the upstream got the caller's %s: %q", k, v)
					}
				}
				if sc := trace.SpanContextFromContext(tc.prop.Extract(context.Background(), propagation.HeaderCarrier(got))); sc.TraceID().String() != tid {
					t.Errorf("the upstream's trace %s, want the caller's %s", sc.TraceID(), tid)
				}
			})
		}
	}
}
