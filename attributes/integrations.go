package attributes

import (
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
)

// The tracing proxy's span, event, attribute and metric names (llmtrace
// proxy; README "The tracing proxy").
const (
	SpanProxyWaitFirstToken = "llm.proxy.wait_first_token"
	SpanProxyStream         = "llm.proxy.stream"
	EventProxyStall         = "llm.proxy.stall"
	EventProxyHeaders       = "llm.proxy.response_headers"
	MetricProxyStalls       = "llm.proxy.stalls"

	ProxyChunks        attribute.Key = "llm.proxy.chunks"         // SSE events with data
	ProxyContentChunks attribute.Key = "llm.proxy.content_chunks" // of which carried content
	ProxyStalls        attribute.Key = "llm.proxy.stalls"
	ProxyGapMedian     attribute.Key = "llm.proxy.gap.median_s"
	ProxyGapMax        attribute.Key = "llm.proxy.gap.max_s"
	ProxyHeadersAfter  attribute.Key = "llm.proxy.response_headers_s" // response headers − request sent
	ProxyStallGap      attribute.Key = "llm.proxy.stall.gap_s"
	ProxyStallMedian   attribute.Key = "llm.proxy.stall.median_gap_s"
	ProxyStallChunk    attribute.Key = "llm.proxy.stall.chunk"

	// HTTP convention keys the integrations set (gen_ai.response.* are in
	// keys.go).
	HTTPStatusCode = semconv.HTTPResponseStatusCodeKey
	ServerAddress  = semconv.ServerAddressKey
	ServerPort     = semconv.ServerPortKey
)

// The update collector's own counters (llmtrace collect).
const (
	MetricCollectorUpdates = "llm.collector.updates"
	MetricCollectorErrors  = "llm.collector.stream_errors"
	MetricCollectorStreams = "llm.collector.streams"

	// CollectorOutcome says what became of an update: queued or dropped.
	CollectorOutcome attribute.Key = "llm.collector.outcome"
	// CollectorError names a stream or connection error: malformed,
	// truncated, oversized, garbage, no_anchor, refused (over the
	// connection cap), unauthorized (no token), timeout or accept.
	CollectorError attribute.Key = "llm.collector.error"
)

// HTTP convention keys the HTTP layer (openaihttp) sets; they are the same
// in every version since the HTTP conventions became stable (v1.23), so its
// spans and metrics read like otelhttp's.
const (
	HTTPRequestMethod      = semconv.HTTPRequestMethodKey
	HTTPRoute              = semconv.HTTPRouteKey
	URLScheme              = semconv.URLSchemeKey
	URLFull                = semconv.URLFullKey
	NetworkProtocolName    = semconv.NetworkProtocolNameKey
	NetworkProtocolVersion = semconv.NetworkProtocolVersionKey
	UserAgentOriginal      = semconv.UserAgentOriginalKey
	ClientAddress          = semconv.ClientAddressKey
	// HTTPRequestBody says why a traced request's body named no model:
	// not_json, no_model, model_too_long, or unread (beyond what the layer
	// reads).
	HTTPRequestBody attribute.Key = "llm.http.request_body"
	// MetricHTTPBodyBudgetRefused counts buffers of bodies the layer did not
	// grow because its memory budget was spent.
	MetricHTTPBodyBudgetRefused = "llm.http.body_budget.refused"
)

// The reconstruction's counter (package reconstruct, the Collector
// connector): values of engines' request spans that contradicted each
// other and were clamped or dropped (SPEC §10).
const (
	MetricReconstructClamped = "llm.reconstruct.clamped"
	// UnitValue counts values (the clamped latencies of a span).
	UnitValue = "{value}"
)
