package openaihttp

import (
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/otelstats"
)

// ServerTimingHeader is the header (or trailer, on streams) WithServerTiming
// writes.
const ServerTimingHeader = "Server-Timing"

// timingHeader prepares Server-Timing at the response's header: the value
// itself for a response that is not streamed (what the tracker knows by
// then), the trailer's announcement for a stream. Called under ex.mu.
func (ex *exchange) timingHeader(h http.Header, at time.Time) {
	if ex.mode == modeSSE {
		if len(h.Values(ServerTimingHeader)) > 0 {
			// The upstream sent its own as a header: ours goes in an
			// undeclared trailer, so as not to repeat theirs.
			ex.trailerKey = http.TrailerPrefix + ServerTimingHeader
			return
		}
		h.Add("Trailer", ServerTimingHeader)
		ex.trailerKey = ServerTimingHeader
		return
	}
	if s, ok := ex.q.Progress(at); ok {
		h.Add(ServerTimingHeader, formatTiming(nil, &s, ex.q.SpanContext()))
	}
}

// timingTrailer computes a stream's Server-Timing trailer at its end,
// before FINISHED is recorded. Called under ex.mu.
func (ex *exchange) timingTrailer(end time.Time) {
	if ex.trailerKey == "" {
		return
	}
	if s, ok := ex.q.Progress(end); ok {
		ex.trailer = formatTiming(nil, &s, ex.q.SpanContext())
	}
}

// setTrailer writes the stream's Server-Timing trailer, once the handler
// is done with the body.
func (ex *exchange) setTrailer(h http.Header) {
	ex.mu.Lock()
	k, v := ex.trailerKey, ex.trailer
	ex.mu.Unlock()
	if k != "" && v != "" {
		h.Add(k, v)
	}
}

// formatTiming appends the Server-Timing value of s to b: the phases the
// tracker knows, in milliseconds, and the request's traceparent.
//
//	queue;dur=1.2, prefill;dur=40.1, ttft;dur=45.0, decode;dur=800.3, e2e;dur=845.3, traceparent;desc="00-…-…-01"
func formatTiming(b []byte, s *otelstats.RequestStats, sc trace.SpanContext) string {
	add := func(name string, l otelstats.Latency) {
		if !l.Valid {
			return
		}
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		b = append(b, name...)
		b = append(b, ";dur="...)
		b = strconv.AppendFloat(b, float64(l.Value)/float64(time.Millisecond), 'f', 3, 64)
	}
	add("queue", s.QueueDuration)
	add("prefill", s.PrefillLatency)
	add("ttft", s.FirstTokenLatency)
	add("decode", s.DecodeLatency)
	add("e2e", s.E2ELatency)
	if sc.IsValid() {
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		b = append(b, `traceparent;desc="00-`...)
		b = append(b, sc.TraceID().String()...)
		b = append(b, '-')
		b = append(b, sc.SpanID().String()...)
		// The trace's own flag: a dropped trace (the head sampler's
		// decision) has no spans to open, and a traceparent passed on
		// must not ask the next hop to sample it.
		if sc.IsSampled() {
			b = append(b, `-01"`...)
		} else {
			b = append(b, `-00"`...)
		}
	}
	return string(b)
}
