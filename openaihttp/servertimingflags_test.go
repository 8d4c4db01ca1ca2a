package openaihttp_test

import (
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/llmtrace/llmtrace/openaihttp"
	"github.com/llmtrace/llmtrace/otelstats"
)

// TestServerTimingSampledFlag: the traceparent in Server-Timing carries
// the trace's sampled flag. A trace the head sampler dropped was
// advertised as sampled (-01): a client looked for a trace that was never
// exported, and one that passed the traceparent on asked the next hop to
// sample a trace whose root is gone.
func TestServerTimingSampledFlag(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sampler sdktrace.Sampler
		flags   string
	}{
		{"kept", sdktrace.AlwaysSample(), "-01"},
		{"dropped", sdktrace.NeverSample(), "-00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newH(t, otelstats.WithHeadSampler(tc.sampler))
			fs := &fakeServer{events: chatStream([]string{"a"}, "stop", ""), json: ""}
			srv, c := serve(t, x.handler(fs, x.tr, openaihttp.WithServerTiming(true)))
			resp, _ := post(t, c, srv.URL+"/v1/chat/completions", `{"model":"m","stream":true}`)
			s := x.only()
			_, tp := serverTiming(t, resp.Trailer.Get(openaihttp.ServerTimingHeader))
			if !strings.HasPrefix(tp, "00-"+s.TraceID+"-") || !strings.HasSuffix(tp, tc.flags) {
				t.Errorf("traceparent %q (sampled %v), want trace %s with flags %s", tp, s.Sampled, s.TraceID, tc.flags)
			}
		})
	}
}
