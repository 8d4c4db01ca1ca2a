package openaihttp

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/otelstats"
)

// DetailHeader asks for a request's detail level (0–3, see otelstats.Detail).
// It is honoured only for trusted callers (WithTrustIncomingSampling).
const DetailHeader = "X-Llmtrace-Detail"

// incoming is how a request's trace relates to its caller's.
type incoming struct {
	ctx     context.Context   // to Arrive in: its span context, if any, is the root's parent
	link    trace.SpanContext // a public caller's span, linked to and not joined
	trusted bool
}

// incoming reads r's trace context per the trust configuration (see the
// package doc, "Incoming trace context").
func (c *config) incoming(r *http.Request) incoming {
	base := r.Context()
	in := incoming{trusted: c.trust != nil && c.trust(r)}
	in.ctx = c.prop.Extract(base, headerCarrier(r.Header))
	sc := trace.SpanContextFromContext(in.ctx)
	switch {
	case !sc.IsValid() || !sc.IsRemote() || sc.Equal(trace.SpanContextFromContext(base)):
		// No incoming trace context: a span of ours (otelhttp outside
		// us), if any, is the parent.
	case in.trusted:
	case c.public != nil && c.public(r):
		// A new trace, linked to the caller's span: a caller cannot even
		// choose the trace our spans land in.
		in.ctx, in.link = trace.ContextWithSpanContext(in.ctx, trace.SpanContextFromContext(base)), sc
	default:
		// Untrusted: keep the caller's trace and parent ids so our spans
		// join its trace, but set the sampled flag whatever the caller
		// sent, so that its flag decides nothing.
		in.ctx = trace.ContextWithRemoteSpanContext(in.ctx, sc.WithTraceFlags(sc.TraceFlags().WithSampled(true)))
	}
	return in
}

// arrival builds the request's Arrival from r and the body's model.
func (c *config) arrival(r *http.Request, in *incoming, at onArrival) otelstats.Arrival {
	a := otelstats.Arrival{Time: at.time, Model: at.model, Operation: at.op, Link: in.link, TraceID: at.traceID, Head: at.head, OnFinish: at.onFinish,
		FrontendFinishes: true}
	if c.scope != nil {
		a.Scope = c.scope(r)
	}
	if in.trusted {
		// A trusted caller's sampled flag decides, and it may ask for a
		// detail level (SPEC §6: never an untrusted one).
		a.TrustParent = true
		if v := r.Header.Get(DetailHeader); v != "" {
			if d, err := otelstats.ParseDetail(v); err == nil {
				a.Detail = d
			}
		}
	}
	return a
}

// onArrival is what an Arrival needs beside the request.
type onArrival struct {
	time     time.Time
	model    string
	op       string
	traceID  trace.TraceID
	head     otelstats.HeadDecision
	onFinish func(*otelstats.RequestStats)
}

func (c *config) newRequestID(r *http.Request) string {
	if c.requestID != nil {
		if id := c.requestID(r); id != "" {
			return id
		}
	}
	return otelstats.NewRequestID()
}

// headerCarrier is propagation.HeaderCarrier without its allocation per
// key: the propagators' lower-case fields (traceparent, tracestate,
// baggage) are canonicalized by a switch, not by
// textproto.CanonicalMIMEHeaderKey, which copies every key not already in
// canonical form.
type headerCarrier http.Header

var (
	_ propagation.TextMapCarrier = headerCarrier(nil)
	_ propagation.ValuesGetter   = headerCarrier(nil) // every baggage header, as HeaderCarrier gives
)

func headerKey(k string) string {
	switch k {
	case "traceparent":
		return "Traceparent"
	case "tracestate":
		return "Tracestate"
	case "baggage":
		return "Baggage"
	}
	return http.CanonicalHeaderKey(k)
}

func (c headerCarrier) Get(key string) string {
	if v := c[headerKey(key)]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c headerCarrier) Values(key string) []string { return c[headerKey(key)] }

func (c headerCarrier) Set(key, value string) { c[headerKey(key)] = []string{value} }

func (c headerCarrier) Keys() []string { return propagation.HeaderCarrier(c).Keys() }

// injectedHeaders are the canonical keys of the headers p writes, and, for
// B3, all of B3's: its multi-header encoding does not list
// X-B3-ParentSpanId, which names the caller's span's parent, and its
// single-header one lists none of the multi headers, which a caller may
// send too. Left beside the ids the proxy writes, they would point the
// upstream's B3 reader at a parent that is not the proxy's span, or carry
// an untrusted caller's X-B3-Flags: 1.
func injectedHeaders(p propagation.TextMapPropagator) []string {
	var keys []string
	add := func(k string) {
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	for _, f := range p.Fields() {
		k := headerKey(f)
		add(k)
		if k == "B3" || strings.HasPrefix(k, "X-B3-") {
			for _, b := range b3Headers {
				add(b)
			}
		}
	}
	return keys
}

// b3Headers are B3's multi-header encoding's headers, canonical.
var b3Headers = []string{"X-B3-Traceid", "X-B3-Spanid", "X-B3-Parentspanid", "X-B3-Sampled", "X-B3-Flags"}
