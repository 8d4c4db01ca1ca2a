package openaihttp

import "github.com/llmtrace/llmtrace/attributes"

// The proxy's span, event, attribute and metric names (the package doc,
// "The proxy's spans").
const (
	SpanWaitFirstToken = attributes.SpanProxyWaitFirstToken
	SpanStream         = attributes.SpanProxyStream
	EventStall         = attributes.EventProxyStall
	EventHeaders       = attributes.EventProxyHeaders
	MetricStalls       = attributes.MetricProxyStalls

	AttrChunks        = attributes.ProxyChunks        // SSE events with data
	AttrContentChunks = attributes.ProxyContentChunks // of which carried content
	AttrStalls        = attributes.ProxyStalls
	AttrGapMedian     = attributes.ProxyGapMedian
	AttrGapMax        = attributes.ProxyGapMax
	AttrHeadersAfter  = attributes.ProxyHeadersAfter // response headers − request sent
	AttrStallGap      = attributes.ProxyStallGap
	AttrStallMedian   = attributes.ProxyStallMedian
	AttrStallChunk    = attributes.ProxyStallChunk
)
