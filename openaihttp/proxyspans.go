package openaihttp

import (
	"context"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/spans"
)

// The proxy's own spans (the package doc, "The proxy's spans") are built as
// plain data once the request has ended and its trace is kept, then either
// started and ended through the Tracer or, given a span processor
// (WithSpanProcessor), handed to it as finished spans, as the tracker does
// with its own trees.

// proxySpans are one request's spans of the proxy's own, in the order they
// end: the upstream call, the stream, the wait for the first token (last,
// so whoever sees it has all of them).
type proxySpans struct {
	spans [3]spans.Span
	ids   [3]trace.SpanID // preset (the upstream call's, which it was given), else zero
	n     int
}

func (ps *proxySpans) add(s spans.Span, id trace.SpanID) {
	ps.spans[ps.n], ps.ids[ps.n] = s, id
	ps.n++
}

// emit builds the request's spans and emits them as children of its root;
// aborted says the request ended as an abort.
func (c *call) emit(aborted bool) {
	var ps proxySpans
	c.buildSpans(&ps, aborted)
	ex := c.ex
	root := ex.q.SpanContext()
	if sp := c.p.cfg.sp; sp != nil {
		spans.ExportChildren(sp, c.p.cfg.src, root, ps.spans[:ps.n], ps.ids[:ps.n])
		return
	}
	ctx := trace.ContextWithSpanContext(context.Background(), root)
	for i := range ps.n {
		s := &ps.spans[i]
		sctx := ctx
		if ps.ids[i].IsValid() {
			sctx = spans.ContextWithIDs(ctx, c.traceID, ps.ids[i])
		}
		_, span := c.p.cfg.tracer.Start(sctx, s.Name, kindOption(s.Kind), trace.WithTimestamp(time.Unix(0, s.Start)),
			trace.WithAttributes(s.Attrs...))
		for _, e := range s.Events {
			span.AddEvent(e.Name, trace.WithTimestamp(time.Unix(0, e.Time)), trace.WithAttributes(e.Attrs...))
		}
		if s.Status == codes.Error {
			span.SetStatus(codes.Error, s.StatusDesc)
		}
		span.End(trace.WithTimestamp(time.Unix(0, s.End)))
	}
}

// The span kinds' start options, boxed once.
var (
	kindClient   = trace.WithSpanKind(trace.SpanKindClient)
	kindInternal = trace.WithSpanKind(trace.SpanKindInternal)
)

func kindOption(k trace.SpanKind) trace.SpanStartOption {
	if k == trace.SpanKindClient {
		return kindClient
	}
	return kindInternal
}

// buildSpans puts the request's spans in ps, with explicit times inside
// its root's.
func (c *call) buildSpans(ps *proxySpans, aborted bool) {
	ex := c.ex
	lo, hi := ex.arrived, maxTime(ex.end, ex.arrived)
	// On the tracker's timeline, as the root's times are: wall readings
	// drift from it while the clock is slewed (a fresh boot's NTP).
	in := func(t time.Time) int64 { return c.p.t.UnixNano(minTime(maxTime(t, lo), hi)) }
	sent := in(c.sent)
	if c.sent.IsZero() {
		sent = in(ex.parsedAt)
	}
	errType := c.clientErrorType(aborted)
	if !c.sent.IsZero() {
		end := c.bodyEnd
		if end.IsZero() {
			end = hi
		}
		s := spans.Span{Name: http.MethodPost, Kind: trace.SpanKindClient, Start: sent, End: in(end), Attrs: c.clientAttrs(errType)}
		if errType != "" {
			s.Status, s.StatusDesc = codes.Error, errType
		}
		ps.add(s, c.clientSpan)
	}
	if !ex.firstContent.IsZero() && ex.mode == modeSSE {
		ps.add(c.streamSpan(in, errType), trace.SpanID{})
	}
	ps.add(c.waitSpan(in, sent, errType), trace.SpanID{})
}

// waitSpan is llm.proxy.wait_first_token: the request sent upstream to its
// first content chunk (a response in one piece: its first byte).
func (c *call) waitSpan(in func(time.Time) int64, sent int64, errType string) spans.Span {
	ex := c.ex
	waitEnd := ex.firstContent
	if waitEnd.IsZero() && ex.mode != modeSSE {
		waitEnd = ex.firstWrite
	}
	end := max(in(maxTime(ex.end, ex.arrived)), sent)
	if !waitEnd.IsZero() {
		end = max(in(waitEnd), sent)
	}
	attrs := make([]attribute.KeyValue, 0, 5)
	attrs = append(attrs, attributes.ServerAddress.String(c.p.host), attributes.ServerPort.Int(c.p.port))
	if ex.status != 0 {
		attrs = append(attrs, attributes.HTTPStatusCode.Int(ex.status))
	}
	if !c.respAt.IsZero() {
		attrs = append(attrs, AttrHeadersAfter.Float64(c.respAt.Sub(c.sent).Seconds()))
	}
	s := spans.Span{Name: SpanWaitFirstToken, Kind: trace.SpanKindInternal, Start: sent, End: end}
	if !c.respAt.IsZero() {
		s.Events = []spans.Event{{Name: EventHeaders, Time: min(max(in(c.respAt), sent), end)}}
	}
	if ex.firstContent.IsZero() && errType != "" {
		attrs = append(attrs, attributes.ErrorType.String(errType))
		s.Status, s.StatusDesc = codes.Error, errType
	}
	s.Attrs = attrs
	return s
}

// streamSpan is llm.proxy.stream: the first content chunk to the last byte
// delivered, with the stream's gaps and stalls.
func (c *call) streamSpan(in func(time.Time) int64, errType string) spans.Span {
	ex := c.ex
	first := in(ex.firstContent)
	d := ex.stall
	attrs := make([]attribute.KeyValue, 0, 7)
	attrs = append(attrs, AttrChunks.Int(ex.events), AttrContentChunks.Int(ex.chunks), AttrStalls.Int(d.count),
		AttrGapMax.Float64(d.max.Seconds()))
	if med, ok := d.anyMedian(); ok {
		attrs = append(attrs, AttrGapMedian.Float64(med.Seconds()))
	}
	if ex.obs.cached >= 0 {
		attrs = append(attrs, attributes.UsageCacheReadInput.Int64(ex.obs.cached))
	}
	s := spans.Span{Name: SpanStream, Kind: trace.SpanKindInternal, Start: first,
		End: max(in(maxTime(ex.lastWrite, ex.lastContent)), first), Events: d.spanEvents(in)}
	if errType != "" {
		attrs = append(attrs, attributes.ErrorType.String(errType))
		s.Status, s.StatusDesc = codes.Error, errType
	}
	s.Attrs = attrs
	return s
}

// clientAttrs are the HTTP conventions' attributes of the upstream call.
func (c *call) clientAttrs(errType string) []attribute.KeyValue {
	a := make([]attribute.KeyValue, 0, 9)
	a = append(a, attributes.HTTPRequestMethod.String(http.MethodPost),
		attributes.ServerAddress.String(c.p.host), attributes.ServerPort.Int(c.p.port),
		attributes.URLFull.String(c.p.urlFull(c.r.URL.Path)))
	if c.upStatus != 0 {
		a = append(a, attributes.HTTPStatusCode.Int(c.upStatus))
	}
	if c.upProto != "" {
		a = append(a, attributes.NetworkProtocolName.String("http"), attributes.NetworkProtocolVersion.String(c.upProto))
	}
	if errType != "" {
		a = append(a, attributes.ErrorType.String(errType))
	}
	return a
}

// maxURLs bounds the upstream URLs a Proxy keeps built: one per traced
// path (routes are configured, so there are few).
const maxURLs = 64

// urlFull is url.full of the upstream call for a client's path: built
// once per path, capped at 2,048 bytes (the cut counted each time).
func (p *Proxy) urlFull(path string) string {
	p.mu.Lock()
	full, ok := p.urls[path]
	p.mu.Unlock()
	if !ok {
		u := *p.up
		u.Path, u.RawPath, u.RawQuery, u.User = upstreamPath(p.up.Path, path), "", "", nil
		full = u.String()
		p.mu.Lock()
		if len(p.urls) < maxURLs {
			p.urls[path] = full
		}
		p.mu.Unlock()
	}
	return p.cfg.capped(full, 2048, attributes.URLFull)
}
